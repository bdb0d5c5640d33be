// Package cliflag owns how pmjail's commands answer -h and --help: the
// command's synopsis and its flags, spelt with the double dash the README
// and the usage use.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// IsHelp reports whether a flag set's Parse error means help was asked for.
func IsHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

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
		if isBool(f) {
			arg = ""
		}
		fmt.Fprintf(w, "  --%s%s\n      %s", f.Name, arg, help)
		if !isZero(f.DefValue) {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func isZero(def string) bool {
	switch def {
	case "", "0", "false", "0s":
		return true
	}
	return false
}
