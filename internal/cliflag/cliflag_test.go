package cliflag

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	fs := flag.NewFlagSet("posture", flag.ContinueOnError)
	fs.Bool("json", false, "print the object")
	fs.String("mode", "auto", "`MODE`: auto or required")
	fs.Int("pids", 0, "task limit")
	var b bytes.Buffer
	Usage(&b, fs, "posture [--json]")
	want := `usage: pmjail posture [--json]

flags:
  --json
      print the object
  --mode MODE
      MODE: auto or required (default auto)
  --pids int
      task limit
`
	if b.String() != want {
		t.Errorf("usage:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	Usage(&b, flag.NewFlagSet("prepare", flag.ContinueOnError), "prepare")
	if b.String() != "usage: pmjail prepare\n" {
		t.Errorf("no flags: %q", b.String())
	}
}

func TestIsHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if err := fs.Parse(args); !isHelp(err) {
			t.Errorf("%v: %v, want help", args, err)
		}
	}
	if isHelp(errors.New("flag provided but not defined: -x")) || !isHelp(fmt.Errorf("run: %w", flag.ErrHelp)) {
		t.Error("isHelp on other errors")
	}
}

func TestParseErrorsUseDoubleDashes(t *testing.T) {
	newSet := func() (*flag.FlagSet, *int, *bool) {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		n := fs.Int("pids", 0, "task limit")
		j := fs.Bool("json", false, "print the object")
		fs.Func("memory", "memory limit", func(v string) error {
			if v == "0" {
				return errors.New("must be above zero")
			}
			return nil
		})
		return fs, n, j
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "0", "x.js"}, `--memory "0": must be above zero`},
		{[]string{"--pids=x"}, `--pids "x": not a valid int`},
		{[]string{"--json=maybe"}, `--json "maybe": want true or false`},
		{[]string{"--nosuch"}, "unknown flag --nosuch"},
		{[]string{"-nosuch=1"}, "unknown flag --nosuch"},
		{[]string{"--memory"}, "--memory needs a value"},
		{[]string{"x.js", "--memory"}, "--memory needs a value"},
		{[]string{"---x"}, "bad flag syntax: ---x"},
		// The first refusal is the one reported.
		{[]string{"--memory", "0", "--pids", "x"}, `--memory "0": must be above zero`},
	} {
		fs, _, _ := newSet()
		err := Parse(fs, tc.args)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}

	fs, pids, js := newSet()
	if err := Parse(fs, []string{"--pids", "7", "--json", "a.js"}); err != nil {
		t.Fatal(err)
	}
	if *pids != 7 || !*js || fs.NArg() != 1 {
		t.Errorf("parsed pids %d json %v args %q", *pids, *js, fs.Args())
	}
	// The values are the flag set's own again, for the usage's types.
	var b bytes.Buffer
	Usage(&b, fs, "run")
	if !strings.Contains(b.String(), "--pids int") || !strings.Contains(b.String(), "  --json\n") {
		t.Errorf("usage after Parse:\n%s", b.String())
	}
	if fs, _, _ := newSet(); !isHelp(Parse(fs, []string{"--help"})) {
		t.Error("--help: want flag.ErrHelp")
	}
}

// Flags may follow the arguments (`run hello.js --json`); after "--"
// everything is an argument; ParseHead stops at the first argument, for a
// program's command line.
func TestParseInterleaves(t *testing.T) {
	newSet := func() (*flag.FlagSet, *string, *bool) {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return fs, fs.String("input", "", "input"), fs.Bool("json", false, "json")
	}
	for _, tc := range []struct {
		args  []string
		input string
		json  bool
		rest  []string
	}{
		{[]string{"hello.js", "--json"}, "", true, []string{"hello.js"}},
		{[]string{"hello.js", "--input", "{}", "--json"}, "{}", true, []string{"hello.js"}},
		{[]string{"--input", "hello.js", "x.js"}, "hello.js", false, []string{"x.js"}},
		// A value is the next argument, whatever it looks like.
		{[]string{"a.js", "--input", "--json"}, "--json", false, []string{"a.js"}},
		{[]string{"a.js", "--input=-", "-"}, "-", false, []string{"a.js", "-"}},
		{[]string{"-", "-json"}, "", true, []string{"-"}},
		{[]string{"a.js", "--", "--json", "b"}, "", false, []string{"a.js", "--json", "b"}},
		{[]string{"--json=false", "a.js", "b.js"}, "", false, []string{"a.js", "b.js"}},
	} {
		fs, input, js := newSet()
		if err := Parse(fs, tc.args); err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if *input != tc.input || *js != tc.json || strings.Join(fs.Args(), " ") != strings.Join(tc.rest, " ") || fs.NArg() != len(tc.rest) {
			t.Errorf("%q: input %q json %v args %q, want %q %v %q", tc.args, *input, *js, fs.Args(), tc.input, tc.json, tc.rest)
		}
	}
	fs, _, _ := newSet()
	if err := Parse(fs, []string{"a.js", "--nosuch"}); err == nil || err.Error() != "unknown flag --nosuch" {
		t.Errorf("an unknown flag after the file: %v", err)
	}
	fs, _, _ = newSet()
	if err := Parse(fs, []string{"a.js", "--help"}); !isHelp(err) {
		t.Errorf("--help after the file: %v", err)
	}

	fs, _, js := newSet()
	if err := ParseHead(fs, []string{"--json", "ls", "--input", "x"}); err != nil {
		t.Fatal(err)
	}
	if !*js || strings.Join(fs.Args(), " ") != "ls --input x" {
		t.Errorf("ParseHead: json %v args %q, want the program's flags left to it", *js, fs.Args())
	}
}
