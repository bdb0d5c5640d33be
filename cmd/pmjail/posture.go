package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/pmjail/pmjail/internal/cliflag"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/posture"
)

// cmdPosture probes the host and prints its posture; it exits 0 if the
// asked mode would run, 1 if it would refuse.
func cmdPosture(args []string) int {
	fs := flag.NewFlagSet("posture", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jsonOut := fs.Bool("json", false, "print the posture object")
	mode := job.ModeAuto
	modeFlag(fs, &mode)
	var extra []string
	requireFlag(fs, &extra, "comma-separated `LAYERS` to require besides the core (e.g. cgroup_memory,landlock)")
	if err := cliflag.Parse(fs, args); err != nil {
		return commandFailure(fs, "posture [--json] [--mode auto|required] [--require LAYERS]", err)
	}
	if err := checkPrivilege(); err != nil {
		// The probe still runs: what this user's jail would lack is its
		// report, but the reason is this, not the host.
		fmt.Fprintf(os.Stderr, "pmjail: posture: %v (the layers below are as this process sees them)\n", err)
	}
	rn, err := newRunner(false, false) // the posture proves every layer
	if err != nil {
		return fail("posture: %v", err)
	}
	report := posture.Probe(context.Background(), posture.Options{Install: rn.Install, Cgroups: rn.Cgroups, CgroupReason: rn.CgroupReason}).Report(mode, extra)
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report)
	} else {
		printPosture(report)
	}
	if report.Decision != "run" {
		return 1
	}
	return 0
}

func printPosture(r *posture.Report) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "LAYER\tSTATE\tDETAIL")
	for _, l := range r.Layers {
		name := l.Name
		if l.Core {
			name += " *"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", name, l.State, l.Detail)
	}
	w.Flush()
	fmt.Printf("\n* containment core (mode required refuses without it)\n")
	fmt.Printf("cgroup: %s", r.Cgroup.Mechanic)
	for ctl, p := range r.Cgroup.Paths {
		if ctl == "" {
			ctl = "unified"
		}
		fmt.Printf(" %s=%s", ctl, p)
	}
	fmt.Println()
	if h := r.Host; h != nil {
		fmt.Printf("kernel: %s, privileged: %v, landlock ABI: %d\n", h.Kernel, h.Privileged, h.LandlockABI)
		for _, rt := range h.Runtimes {
			fmt.Printf("runtime %s: %s %s %s\n", rt.Name, rt.Version, rt.Path, rt.Start)
		}
		var keys []string
		for k, v := range h.Sysctls {
			keys = append(keys, k+"="+v)
		}
		slices.Sort(keys)
		fmt.Printf("sysctls: %s\n", strings.Join(keys, " "))
	}
	fmt.Printf("mode %s: %s", r.Mode, r.Decision)
	if len(r.Missing) > 0 {
		fmt.Printf(" (missing: %s)", strings.Join(r.Missing, ", "))
	}
	fmt.Println()
}

// modeFlag defines --mode, checked as it is parsed, into dst.
func modeFlag(fs *flag.FlagSet, dst *string) {
	fs.Func("mode", "`MODE`: auto (default) or required", func(v string) error {
		if v != job.ModeAuto && v != job.ModeRequired {
			return errors.New("want auto or required")
		}
		*dst = v
		return nil
	})
}

// requireFlag defines --require: posture layer names, comma-separated,
// added to dst (none for an empty value, as a script's empty variable
// gives). The flag may be repeated.
func requireFlag(fs *flag.FlagSet, dst *[]string, usage string) {
	fs.Func("require", usage, func(v string) error {
		if v == "" {
			return nil
		}
		for _, l := range strings.Split(v, ",") {
			if !slices.Contains(posture.Names, l) {
				return fmt.Errorf("unknown layer %q (layers: %s)", l, strings.Join(posture.Names, ", "))
			}
			*dst = append(*dst, l)
		}
		return nil
	})
}
