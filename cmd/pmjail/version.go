package main

import (
	"fmt"
	"runtime/debug"
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
	return 0
}
