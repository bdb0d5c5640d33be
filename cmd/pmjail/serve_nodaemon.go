//go:build nodaemon

package main

// daemonBuiltIn says this pmjail carries the daemon. The Makefile builds
// pmjail with the nodaemon tag, which leaves the daemon's dependencies (the
// HTTP server, the Prometheus client, go-systemd) out of the CLI, whose
// start-up every `pmjail run` pays: its pmjail-serve is the daemon.
const daemonBuiltIn = false

// serveHere refuses: the daemon is pmjail-serve, which is missing or of
// another build (why).
func serveHere(_ []string, why error) int {
	return fail("serve: the daemon is %s, installed beside pmjail from the same build: %v", serveBinaryName, why)
}
