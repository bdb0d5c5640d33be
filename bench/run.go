package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Variant is one side of a comparison: a command run to completion and
// timed from start to exit, or a request made in-process.
type Variant struct {
	Name string
	Argv []string
	// Call, when set, is timed instead of a command: a request to a daemon,
	// from sending it to reading its result. Shown is its command line for
	// the report.
	Call  func(context.Context) error
	Shown string
	// After runs once the clock has stopped and before the next variant:
	// a daemon's pool of init stages refilling, which must not fall in
	// another variant's time.
	After func(context.Context) error
	// Dir is the working directory: a scratch folder, so that no project
	// config (package.json, deno.json) is found by Deno.
	Dir string
	// Env is added to the bench's own environment.
	Env []string
	// FreshDenoDir gives each run its own empty DENO_DIR (made before the
	// clock starts, removed after it stops).
	FreshDenoDir bool
	// Want must appear in the command's stdout for a run to count.
	Want string
	// Stdin, when set, is a file the command reads as its standard input.
	Stdin string
}

// Command is the variant as a shell-ready line, for the report.
func (v Variant) Command() string {
	if v.Call != nil {
		return v.Shown
	}
	var b strings.Builder
	if v.FreshDenoDir {
		b.WriteString("DENO_DIR=$(mktemp -d) ")
	}
	for _, e := range v.Env {
		b.WriteString(e + " ")
	}
	b.WriteString(strings.Join(v.Argv, " "))
	if v.Stdin != "" {
		b.WriteString(" < " + v.Stdin)
	}
	return b.String()
}

// Once runs v one time and returns its wall time.
func (v Variant) Once(ctx context.Context) (time.Duration, error) {
	s, err := v.run(ctx)
	return s.end - s.start, err
}

// span is when a run started and ended, on CLOCK_MONOTONIC: the clock the
// kernel's trace events can be stamped with (see tracer).
type span struct{ start, end time.Duration }

func monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // cannot fail on Linux
	}
	return time.Duration(ts.Nano())
}

func (v Variant) run(ctx context.Context) (span, error) {
	if v.Call != nil {
		return v.request(ctx)
	}
	cmd := exec.CommandContext(ctx, v.Argv[0], v.Argv[1:]...)
	cmd.Env = append(os.Environ(), v.Env...)
	cmd.Dir = v.Dir
	if v.FreshDenoDir {
		dir, err := os.MkdirTemp("", "bench-denodir-")
		if err != nil {
			return span{}, err
		}
		defer os.RemoveAll(dir)
		cmd.Env = append(cmd.Env, "DENO_DIR="+dir)
	}
	if v.Stdin != "" {
		f, err := os.Open(v.Stdin)
		if err != nil {
			return span{}, fmt.Errorf("%s: %w", v.Name, err)
		}
		defer f.Close()
		cmd.Stdin = f
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	s := span{start: monotonic()}
	err := cmd.Run()
	s.end = monotonic()
	if err != nil {
		return span{}, fmt.Errorf("%s: %w: %s", v.Name, err, tail(stderr.String()))
	}
	if v.Want != "" && !strings.Contains(stdout.String(), v.Want) {
		return span{}, fmt.Errorf("%s: stdout %q lacks %q; stderr: %s", v.Name, tail(stdout.String()), v.Want, tail(stderr.String()))
	}
	if v.After != nil {
		if err := v.After(ctx); err != nil {
			return span{}, fmt.Errorf("%s: %w", v.Name, err)
		}
	}
	return s, nil
}

// request times v's Call alone, then runs its After.
func (v Variant) request(ctx context.Context) (span, error) {
	s := span{start: monotonic()}
	err := v.Call(ctx)
	s.end = monotonic()
	if err == nil && v.After != nil {
		err = v.After(ctx)
	}
	if err != nil {
		return span{}, fmt.Errorf("%s: %w", v.Name, err)
	}
	return s, nil
}

// Interleave runs the variants in turn (see rotate) and returns each
// variant's timings.
func Interleave(ctx context.Context, variants []Variant, reps, warmup int) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(variants))
	err := rotate(len(variants), reps, warmup, func(i int, measured bool) error {
		d, err := variants[i].Once(ctx)
		if err == nil && measured {
			out[i] = append(out[i], d)
		}
		return err
	})
	return out, err
}

// rotate calls one for each of n variants in warmup+reps rounds, rotating
// which goes first in each round so that none always runs right after
// another; measured is false in the warm-up rounds. It stops at the first
// error.
func rotate(n, reps, warmup int, one func(i int, measured bool) error) error {
	for round := 0; round < warmup+reps; round++ {
		for j := 0; j < n; j++ {
			if err := one((j+round)%n, round >= warmup); err != nil {
				return err
			}
		}
	}
	return nil
}

// tail is the last few hundred bytes of s, for error messages.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = "…" + s[len(s)-400:]
	}
	return s
}
