package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pmjail/pmjail/job"
)

// helloFiles is Deno hello as a several-file job: the entry imports a
// module beside it, which imports one in a subdirectory.
var helloFiles = map[string]string{
	"main.js":     "import { greeting } from \"./greet.js\";\nconsole.log(greeting);\n",
	"greet.js":    "import { word } from \"./lib/word.js\";\nexport const greeting = word;\n",
	"lib/word.js": "export const word = \"hello\";\n",
}

// filesHello: the multi-file hello against the one-file hello, through
// the CLI (`pmjail run DIR` against `pmjail run FILE`) and, with a daemon,
// as requests; the target is the several-file form's ratio.
func (b *Bench) filesHello(ctx context.Context) error {
	b.Report.Section("Several files: a three-file hello vs the one-file hello")
	dir := b.work("hello-files")
	for p, text := range helloFiles {
		path := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
	}
	variants := []Variant{
		{Name: "pmjail run hello.js", Argv: []string{b.Pmjail, "run", "hello.js"}, Dir: b.Work, Want: "hello"},
		{Name: "pmjail run hello-files/ (3 files)", Argv: []string{b.Pmjail, "run", "hello-files"}, Dir: b.Work, Want: "hello"},
	}
	if b.Daemon != nil {
		full, err := b.Daemon.PoolFullStats(ctx)
		if err != nil {
			return err
		}
		one, err := b.Daemon.helloVariant("pmjail daemon, source", "console.log(\"hello\");\n", "hello\n", full.Pooled)
		if err != nil {
			return err
		}
		req := &job.Request{Runtime: "deno", Files: helloFiles}
		several := Variant{
			Name:  "pmjail daemon, files (3)",
			Call:  func(ctx context.Context) error { return b.Daemon.runDeno(ctx, req, "hello\n") },
			After: one.After,
			Shown: fmt.Sprintf("the same request with files %q", "main.js, greet.js, lib/word.js"),
		}
		variants = append(variants, one, several)
	}
	s, err := b.compare(ctx, variants, b.Reps, 3, 0)
	if err != nil {
		return err
	}
	target := func(what string, several, one Summary) {
		r := Ratio(several.Median, one.Median)
		b.Report.Target(what+": a three-file hello ≤ 1.05× the one-file hello (median)", ratioAbove(r), r <= 1.05)
	}
	target("CLI", s[1], s[0])
	if b.Daemon != nil {
		target("daemon", s[3], s[2])
	}
	b.Report.Para("A several-file job's files are written into the job's root as the one file is, read-only under /job; Deno resolves the relative imports there. The extra cost is writing and loading two more small modules.")
	return nil
}
