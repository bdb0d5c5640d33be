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

// Parse parses args into fs, flags and arguments in any order: `run
// hello.js --json` as `run --json hello.js` (package flag stops at the
// first argument that is not a flag). Everything after "--" is an
// argument; fs.Args() holds the arguments in their order. Errors name the
// flag first and with two dashes: `--memory "0": must be above zero`,
// `unknown flag --nosuch`, `--memory needs a value` (package flag says
// "invalid value "0" for flag -memory: ..."). A request for help returns
// flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	flags, rest, complete := split(fs, args)
	if !complete {
		return parse(fs, flags) // for its error: the last flag's value is missing
	}
	return parse(fs, append(append(flags, "--"), rest...))
}

// ParseHead parses the flags at the head of args into fs, up to "--" or
// the first argument that is not a flag, as package flag does: what
// follows is a program's command line (`exec --timeout 5s -- ls -l`, or
// `exec ls -l`), whose flags are its own. Errors are worded as Parse's.
func ParseHead(fs *flag.FlagSet, args []string) error {
	return parse(fs, args)
}

// split separates args into the flags, each with its value, and the other
// arguments, which are all of those after "--". A flag that takes a value
// and is not spelt --name=value takes the next argument, as package flag
// has it, whatever that looks like; complete is false if the last flag
// lacks its value.
func split(fs *flag.FlagSet, args []string) (flags, rest []string, complete bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(rest, args[i+1:]...), true
		}
		if len(a) < 2 || a[0] != '-' {
			rest = append(rest, a) // "-" is an argument: stdin
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if f := fs.Lookup(name); f != nil && !hasValue && !isBool(f.Value) {
			if i+1 == len(args) {
				return flags, rest, false
			}
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, rest, true
}

// parse runs package flag's Parse on args, rewording its errors.
func parse(fs *flag.FlagSet, args []string) error {
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
