package main

import (
	"fmt"

	"github.com/pmjail/pmjail/internal/buildinfo"
	"github.com/pmjail/pmjail/internal/sibling"
	"github.com/pmjail/pmjail/jail"
)

// version is this build's, as the daemon's /v1/health reports it too.
var version = buildinfo.Version()

// cmdVersion answers `pmjail version`, `pmjail --version` and `pmjail -v`:
// the version, then the init stage and daemon this binary uses.
func cmdVersion(args []string) int {
	if len(args) != 0 {
		return fail("version: unexpected arguments %q", args)
	}
	fmt.Printf("pmjail %s\n", version)
	if init := jail.FindInitStage(); init.Self {
		fmt.Printf("init stage: this binary (%s)\n", init.Reason)
	} else {
		fmt.Printf("init stage: %s\n", init.Path)
	}
	switch path, err := sibling.Find(serveBinaryName, serveBuildID); {
	case err != nil && daemonBuiltIn:
		fmt.Printf("daemon: this binary (%v)\n", err)
	case err != nil:
		fmt.Printf("daemon: unavailable (%v)\n", err)
	default:
		fmt.Printf("daemon: %s\n", path)
	}
	return 0
}
