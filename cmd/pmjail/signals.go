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

// signalContext is a context that the first of endingSignals cancels,
// less those pmjail started with ignored: `nohup pmjail run x.js &` (and
// a script's background job, SIGINT ignored) must outlive the terminal,
// and signal.Notify would install a handler over the inherited SIG_IGN
// (Go records it for SIGHUP and SIGINT).
func signalContext() (context.Context, context.CancelFunc) {
	var sigs []os.Signal
	for _, s := range endingSignals {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) == 0 {
		// Notify with no signal would relay every one.
		return context.WithCancel(context.Background())
	}
	return signal.NotifyContext(context.Background(), sigs...)
}
