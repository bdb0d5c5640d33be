package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// endingSignals cancel what a supervising command (run, exec, prepare)
// does, which then ends as a daemon's run ends when its client goes: the
// jail torn down, its cgroup removed, a build's directory too, and pmjail
// exits 125 (cancelled). Besides SIGINT and SIGTERM, SIGHUP (the
// terminal went away) and SIGPIPE (what read the output stopped: `pmjail
// run x.js | head -1`) are among them: by default each killed pmjail
// outright, its init stage died by its parent-death signal, and its
// cgroup and a build's directory stayed for a later sweep. Once SIGPIPE
// is caught, a write to the closed pipe fails with EPIPE instead.
var endingSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

// signalContext is a context that the first of endingSignals cancels.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), endingSignals...)
}
