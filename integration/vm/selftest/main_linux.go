package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

// roles are the child processes the checks start by re-executing this
// binary: argv[1] names the role, so no flag parsing or checks run in them.
var roles = map[string]func() int{
	roleAlloc:     runAllocChild,
	roleNamespace: runNamespaceChild,
}

// check is one named verification; err nil means PASS, detail is printed either way.
type check struct {
	name string
	run  func() (detail string, err error)
}

func main() {
	if len(os.Args) > 1 {
		if role, ok := roles[os.Args[1]]; ok {
			os.Exit(role())
		}
	}
	deno := flag.String("deno", "deno", "Deno binary to time `deno eval` with (empty: skip)")
	flag.Parse()

	checks := []check{
		{"cgroup2 hierarchy with memory pids cpu", checkHierarchy},
		{"OOM kill in a child cgroup of the root (CLONE_INTO_CGROUP)", checkRootChildOOM},
		{"delegated supervisor: leaf move, controllers, OOM in a job cgroup", checkDelegatedOOM},
		{"user+pid+mount+net namespaces", checkNamespaces},
		{"seccomp filters and user notification", checkSeccomp},
		{"Landlock", checkLandlock},
	}
	if *deno != "" {
		checks = append(checks, check{"deno eval (dynamic program)", func() (string, error) { return checkDeno(*deno) }})
	}

	failed := 0
	for _, c := range checks {
		start := time.Now()
		detail, err := c.run()
		took := time.Since(start).Round(time.Millisecond)
		if errors.Is(err, errSkip) {
			fmt.Printf("SKIP %s: %v\n", c.name, err)
			continue
		}
		if err != nil {
			failed++
			fmt.Printf("FAIL %s (%s): %v\n", c.name, took, err)
			continue
		}
		fmt.Printf("PASS %s (%s): %s\n", c.name, took, detail)
	}
	fmt.Printf("selftest: %d of %d checks failed\n", failed, len(checks))
	if failed > 0 {
		os.Exit(1)
	}
}
