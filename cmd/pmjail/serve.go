package main

import (
	"os"
	"syscall"

	"github.com/pmjail/pmjail/internal/sibling"
)

// serveBinaryName is the daemon's own binary, installed beside pmjail.
const serveBinaryName = "pmjail-serve"

// serveBuildID is the Go build ID of the pmjail-serve built with this
// binary (the Makefile passes -X main.serveBuildID=...).
var serveBuildID string

// cmdServe execs the daemon, pmjail-serve, from beside this binary: `pmjail
// serve [--socket PATH] [--config FILE]`. The process stays the same, so a
// systemd unit's notify socket, socket activation and MAINPID carry over.
func cmdServe(args []string) int {
	path, err := sibling.Find(serveBinaryName, serveBuildID)
	if err != nil {
		return fail("serve: the daemon is %s, installed beside pmjail from the same build: %v", serveBinaryName, err)
	}
	argv := append([]string{path}, args...)
	err = syscall.Exec(path, argv, os.Environ())
	return fail("serve: exec %s: %v", path, err)
}
