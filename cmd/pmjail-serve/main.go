// Command pmjail-serve is pmjail's daemon (package daemon) in a binary of
// its own, which `pmjail serve` execs when it sits beside pmjail from the
// same build: the daemon's dependencies (the HTTP server, the Prometheus
// client, go-systemd) then stay out of the CLI, whose start-up every
// `pmjail run` pays.
package main

import (
	"os"

	"github.com/pmjail/pmjail/internal/buildinfo"
	"github.com/pmjail/pmjail/internal/daemon"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/posture"
	"github.com/pmjail/pmjail/queue"
)

// exitFailure is the exit code of a role that returned, which none does.
const exitFailure = 125

// roles are the parts this binary plays in a jail's life, as pmjail does:
// its own init stage when pmjail-init is missing, and the posture probe;
// and the NATS client of pmjail's submit.
var roles = map[string]func(){
	initstage.Role:    initstage.Main,
	posture.ProbeRole: posture.ProbeChild,
	// `pmjail submit --nats`, whose NATS client lives here, not in the CLI.
	queue.SubmitRole: func() { os.Exit(queue.SubmitMain(os.Args[2:], os.Stdin, os.Stdout, os.Stderr)) },
}

func main() {
	if len(os.Args) > 1 {
		if role, ok := roles[os.Args[1]]; ok {
			role()
			os.Exit(exitFailure) // roles never return
		}
	}
	os.Exit(daemon.Main(os.Args[1:], buildinfo.Version()))
}
