package main

import (
	"fmt"
	"runtime/debug"

	"github.com/pmjail/pmjail/internal/sibling"
	"github.com/pmjail/pmjail/jail"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func cmdVersion(args []string) int {
	rev := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " (" + s.Value[:12] + ")"
			}
		}
	}
	fmt.Printf("pmjail %s%s\n", version, rev)
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
