//go:build !nodaemon

package main

import "github.com/pmjail/pmjail/internal/daemon"

// daemonBuiltIn says this pmjail carries the daemon: built alone (`go
// install ./cmd/pmjail`), every command works with nothing beside it.
const daemonBuiltIn = true

// serveHere runs the daemon in this process, for want of a pmjail-serve
// of this build.
func serveHere(args []string, _ error) int {
	return daemon.Main(args, version)
}
