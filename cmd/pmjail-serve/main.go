// Command pmjail-serve is pmjail's daemon: the socket API, its metrics and
// systemd integration, and the job supervisor behind them. Users start it as
// `pmjail serve`, which execs it; it is a binary of its own so that the
// daemon's dependencies (the HTTP server, the Prometheus client, go-systemd)
// stay out of the CLI, whose start-up every `pmjail run` pays.
package main

import (
	"fmt"
	"os"

	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/posture"
)

// exitFailure is the exit code of a daemon that could not start or stopped
// on an error.
const exitFailure = 125

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// roles are the parts this binary plays in a jail's life, as pmjail does:
// its own init stage when pmjail-init is missing, and the posture probe.
var roles = map[string]func(){
	initstage.Role:    initstage.Main,
	posture.ProbeRole: posture.ProbeChild,
}

func main() {
	if len(os.Args) > 1 {
		if role, ok := roles[os.Args[1]]; ok {
			role()
			os.Exit(exitFailure) // roles never return
		}
	}
	os.Exit(cmdServe(os.Args[1:]))
}

// fail prints one clear line and returns the failure exit code.
func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "pmjail: "+format+"\n", args...)
	return exitFailure
}
