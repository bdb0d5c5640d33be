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

// cmdServe runs the daemon: `pmjail serve [--socket PATH] [--config FILE]`.
// It execs pmjail-serve from beside this binary when that is of its build;
// the process stays the same, so a systemd unit's notify socket, socket
// activation and MAINPID carry over. Otherwise a pmjail built with the
// daemon (the default; see serve_daemon.go) runs it in this process.
func cmdServe(args []string) int {
	path, err := sibling.Find(serveBinaryName, serveBuildID)
	if err != nil {
		return serveHere(args, err)
	}
	argv := append([]string{path}, args...)
	err = syscall.Exec(path, argv, os.Environ())
	return fail("serve: exec %s: %v", path, err)
}
