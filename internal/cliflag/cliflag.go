// Package cliflag owns how pmjail's commands parse their flags and answer
// -h and --help: flags are spelt with the double dash the README and the
// usage use, in the synopsis, the flag list and every parse error.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// isHelp reports whether a flag set's Parse error means help was asked for.
func isHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// Help answers a request for help (-h, --help) in err: fs's usage on
// stdout, and true, for the command to exit 0. Any other err is left to
// the caller.
func Help(fs *flag.FlagSet, synopsis string, err error) bool {
	if !isHelp(err) {
		return false
	}
	Usage(os.Stdout, fs, synopsis)
	return true
}

// Parse parses args into fs, whose errors name the flag first and with two
// dashes: `--memory "0": must be above zero`, `unknown flag --nosuch`,
// `--memory needs a value` (package flag says "invalid value "0" for flag
// -memory: ..."). A request for help returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	var setErr error
	fs.VisitAll(func(f *flag.Flag) { f.Value = &naming{Value: f.Value, name: f.Name, err: &setErr} })
	defer fs.VisitAll(func(f *flag.Flag) { f.Value = f.Value.(*naming).Value })
	err := fs.Parse(args)
	if err == nil || isHelp(err) {
		return err
	}
	if setErr != nil {
		return setErr
	}
	// What is left names a flag that is not defined or lacks its value;
	// package flag ends both messages with the name.
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag --%s", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Errorf("--%s needs a value", name)
	}
	return err
}

// naming wraps a flag's value for one Parse, to keep the first value it
// refuses together with the flag's name.
type naming struct {
	flag.Value
	name string
	err  *error
}

func (n *naming) Set(v string) error {
	err := n.Value.Set(v)
	if err != nil && *n.err == nil {
		cause := err
		// Package flag's own types say only "parse error".
		if typ, _ := flag.UnquoteUsage(&flag.Flag{Value: n.Value}); err.Error() == "parse error" {
			if n.IsBoolFlag() {
				cause = errors.New("want true or false")
			} else {
				cause = fmt.Errorf("not a valid %s", typ)
			}
		}
		*n.err = fmt.Errorf("--%s %q: %w", n.name, v, cause)
	}
	return err
}

// IsBoolFlag passes the wrapped value's answer on: package flag asks it to
// know whether the flag takes a value.
func (n *naming) IsBoolFlag() bool { return isBool(n.Value) }

// Usage writes "usage: pmjail SYNOPSIS" and one entry per flag of fs, in
// name order, with its default where that is not the zero value.
func Usage(w io.Writer, fs *flag.FlagSet, synopsis string) {
	fmt.Fprintf(w, "usage: pmjail %s\n", synopsis)
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprintln(w, "\nflags:")
			first = false
		}
		arg, help := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		if isBool(f.Value) {
			arg = ""
		}
		fmt.Fprintf(w, "  --%s%s\n      %s", f.Name, arg, help)
		if !isZero(f.DefValue) {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func isBool(v flag.Value) bool {
	b, ok := v.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func isZero(def string) bool {
	switch def {
	case "", "0", "false", "0s":
		return true
	}
	return false
}
