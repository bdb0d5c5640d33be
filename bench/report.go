package main

import (
	"fmt"
	"strings"
)

// Report collects markdown: the body in the order sections run, and the
// targets, which go at the top.
type Report struct {
	body    strings.Builder
	targets [][]string
	notes   []string
}

func (r *Report) Section(title string) { fmt.Fprintf(&r.body, "\n## %s\n\n", title) }

func (r *Report) Para(format string, args ...any) {
	fmt.Fprintf(&r.body, format+"\n\n", args...)
}

// Commands lists the exact command lines a table was measured with.
func (r *Report) Commands(lines ...string) {
	r.body.WriteString("```sh\n")
	for _, l := range lines {
		r.body.WriteString(l + "\n")
	}
	r.body.WriteString("```\n\n")
}

func (r *Report) Table(header []string, rows [][]string) {
	r.body.WriteString(tableMD(header, rows))
	r.body.WriteString("\n")
}

// Target records one goal of the issue next to what was measured.
func (r *Report) Target(goal, measured string, met bool) {
	verdict := "**not met**"
	if met {
		verdict = "met"
	}
	r.targets = append(r.targets, []string{goal, measured, verdict})
}

// Skip records a target that could not be measured on this run.
func (r *Report) Skip(goal, why string) {
	r.targets = append(r.targets, []string{goal, why, "not measured"})
}

// Note is a line for the summary: a skipped section, a failure.
func (r *Report) Note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func tableMD(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}
