package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pmjail/pmjail/internal/cliflag"
	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/runtimes"
)

const packagesSynopsis = `packages add [--registry URL] npm:NAME@X.Y.Z|FILE.tgz|FILE.whl...
       packages list [--json]
       packages remove npm:NAME@X.Y.Z|py:NAME@VERSION...`

// cmdPackages manages the package store in the state directory: the
// operator's vetted npm packages and pure-Python wheels, the only ones a
// job can import (see docs/packages.md). Only this command reaches a
// registry; a job never does.
func cmdPackages(args []string) int {
	fs := flag.NewFlagSet("packages", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	registry := fs.String("registry", packages.DefaultRegistry, "npm registry to fetch npm: packages from")
	asJSON := fs.Bool("json", false, "list as JSON")
	if len(args) == 0 {
		return fail("packages: want add, list or remove\nusage: pmjail %s", packagesSynopsis)
	}
	verb := args[0]
	if verb == "help" || strings.HasPrefix(verb, "-") {
		// pmjail packages --help, or a flag before the subcommand.
		if verb == "help" {
			args = []string{"--help"}
		}
		if err := cliflag.Parse(fs, args); err != nil {
			return commandFailure(fs, packagesSynopsis, err)
		}
		return fail("packages: name the subcommand first: pmjail %s", packagesSynopsis)
	}
	if err := cliflag.Parse(fs, args[1:]); err != nil {
		return commandFailure(fs, packagesSynopsis, err)
	}
	in, err := runtimes.Locate()
	if err != nil {
		return fail("packages: %v", oneLine(err))
	}
	store := packages.Open(in.StateDir)
	store.Registry = *registry
	switch verb {
	case "add":
		if fs.NArg() == 0 {
			return fail("packages add: name a package (npm:NAME@X.Y.Z) or a file (.tgz, .whl)")
		}
		ctx, stop := signalContext()
		defer stop()
		// What an add killed before its end left, before this one's.
		for _, old := range store.PruneWork(time.Now()) {
			fmt.Printf("removed stale %s\n", old)
		}
		for _, a := range fs.Args() {
			var e packages.Entry
			if strings.HasPrefix(a, "npm:") {
				ref, err := packages.ParseRef(a)
				if err != nil {
					return fail("packages add: %v", err)
				}
				e, err = store.AddNPM(ctx, ref)
				if err != nil {
					return fail("packages add: %v", err)
				}
			} else if err := addArg(a); err != nil {
				return fail("packages add: %v", err)
			} else if e, err = store.AddFile(a); err != nil {
				return fail("packages add: %v", err)
			}
			fmt.Printf("added %s (%s)\n", e.Ref, e.Integrity)
		}
		return 0
	case "list":
		if fs.NArg() != 0 {
			return fail("packages list: unexpected arguments %q", fs.Args())
		}
		list, err := store.List()
		if err != nil {
			return fail("packages list: %v", err)
		}
		if *asJSON {
			out := []map[string]any{}
			for _, e := range list {
				out = append(out, map[string]any{"ref": e.Ref.String(), "integrity": e.Integrity, "dependencies": e.Dependencies, "source": e.Source})
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(out)
			return 0
		}
		for _, e := range list {
			fmt.Printf("%s\t%s\n", e.Ref, e.Integrity)
		}
		return 0
	case "remove":
		if fs.NArg() == 0 {
			return fail("packages remove: name a package (npm:NAME@X.Y.Z or py:NAME@VERSION)")
		}
		for _, a := range fs.Args() {
			ref, err := packages.ParseRef(a)
			if err == nil {
				err = store.Remove(ref)
			}
			if err != nil {
				return fail("packages remove: %v", err)
			}
			fmt.Printf("removed %s\n", ref)
		}
		return 0
	}
	return fail("packages: unknown subcommand %q (want add, list or remove)", verb)
}

// storedPackages is what a CLI run may import: every package in the
// store (the CLI's user is its own operator).
func storedPackages() []packages.Ref {
	in, err := runtimes.Locate()
	if err != nil {
		return nil
	}
	list, err := packages.Open(in.StateDir).List()
	if err != nil {
		return nil
	}
	refs := make([]packages.Ref, 0, len(list))
	for _, e := range list {
		refs = append(refs, e.Ref)
	}
	return refs
}

// addArg refuses an argument of packages add that is neither npm:NAME@X.Y.Z
// nor a package file: "zod@3.23.8" and "py:greet@1.0" were answered as
// files of no known kind, and neither said what to write instead.
func addArg(a string) error {
	for _, ext := range []string{".whl", ".tgz", ".tar.gz"} {
		if strings.HasSuffix(a, ext) {
			return nil
		}
	}
	if strings.HasPrefix(a, "py:") {
		return fmt.Errorf("%s: a wheel is added from its file (NAME-VERSION-py3-none-any.whl): only npm packages are fetched (npm:NAME@X.Y.Z)", a)
	}
	return fmt.Errorf("%s: want npm:NAME@X.Y.Z from the registry, or the file of an npm tarball (.tgz) or a wheel (.whl)", a)
}
