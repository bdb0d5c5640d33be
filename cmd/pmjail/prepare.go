package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pmjail/pmjail/internal/cliflag"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/runtimes"
)

// cmdPrepare builds what pmjail derives from its runtimes once per Pyodide
// and Deno version, outside any guest: the Pyodide memory snapshot and the
// warm Deno code cache; and, once per pmjail build, the built-in profiles'
// compiled seccomp filters. `make setup` calls it; a run or the daemon
// builds whatever is missing on first use too, so it is an optimisation
// only.
func cmdPrepare(args []string) int {
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := cliflag.Parse(fs, args); err != nil {
		return commandFailure(fs, "prepare", err)
	}
	if fs.NArg() != 0 {
		return fail("prepare: unexpected arguments %q", fs.Args())
	}
	in, err := runtimes.Locate()
	if err == nil {
		err = in.CheckDirs()
	}
	if err != nil {
		return fail("prepare: %v", oneLine(err))
	}
	in.Warmer = job.Warm
	ctx, stop := signalContext()
	defer stop()
	p, err := in.Prepare(ctx)
	if err != nil {
		return fail("prepare: %v", oneLine(err))
	}
	fmt.Printf("pyodide snapshot: %s (%d bytes, sha256 %s)\n", p.Snapshot.Path, p.Snapshot.Meta.Size, p.Snapshot.Meta.SHA256)
	if p.DenoCache != nil {
		fmt.Printf("deno code cache: %s (%d bytes)\n", p.DenoCache.Dir, p.DenoCache.Size())
	} else {
		fmt.Printf("deno code cache: none (%s)\n", p.DenoCacheReason)
	}
	if p.GuestCache != nil {
		fmt.Printf("deno guest cache: %s (%d bytes)\n", p.GuestCache.Dir, p.GuestCache.Size())
	} else {
		fmt.Printf("deno guest cache: none (%s)\n", p.GuestCacheReason)
	}
	if dir, n, err := job.PrepareFilters(in); err != nil {
		fmt.Printf("seccomp filters: not cached (%s)\n", oneLine(err))
	} else {
		fmt.Printf("seccomp filters: %s (%d profile and program kind pairs)\n", dir, n)
	}
	stale := append(in.Prune(p), rootfs.PruneLinks(in.StateDir)...)
	stale = append(stale, packages.Open(in.StateDir).PruneWork(time.Now())...)
	for _, old := range stale {
		fmt.Printf("removed stale %s\n", old)
	}
	return 0
}

// oneLine keeps an error to one line: a failed build quotes the loader's
// output, which may span several.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
