package cliflag

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
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
		if err := fs.Parse(args); !IsHelp(err) {
			t.Errorf("%v: %v, want help", args, err)
		}
	}
	if IsHelp(errors.New("flag provided but not defined: -x")) || !IsHelp(fmt.Errorf("run: %w", flag.ErrHelp)) {
		t.Error("IsHelp on other errors")
	}
}
