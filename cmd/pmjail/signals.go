package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// endingSignals cancel what a supervising command (run, exec, prepare)
// does, which then ends as a daemon's run ends when its client goes: the
// jail torn down, its cgroup removed, a build's directory too, and pmjail
// exits 125 (cancelled). Besides SIGINT and SIGTERM, SIGHUP (the
// terminal went away) is among them: by default it killed pmjail
// outright, its init stage died by its parent-death signal, and its
// cgroup and a build's directory stayed for a later sweep.
var endingSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// errOutputGone is why a run ends whose output's reader went: `pmjail run
// x.js | head -1` (see untilBroken).
var errOutputGone = errors.New("the output's reader went away (broken pipe)")

// signalContext is a context that the first of endingSignals cancels,
// but SIGHUP only when pmjail did not start with it ignored: `nohup
// pmjail run x.js &` must outlive the terminal, and signal.Notify would
// install a handler over the inherited SIG_IGN (Go records it). (SIGINT
// is taken as before, ignored or not: a script's background job, which
// has it ignored, stays cancellable with kill -INT.)
//
// SIGPIPE is caught from then on and never acted on. Go's default killed
// pmjail at a write to a broken stdout or stderr, leaving the run's
// cgroup; caught, that write fails with EPIPE, which ends the run
// (untilBroken). Ending the run on the signal itself ended it for any
// write's EPIPE: the request broker's, when an origin answers early and
// closes under an upload, cancelled the guest's whole run. A handler, not
// SIG_IGN, which the jail's processes would inherit.
func signalContext() (context.Context, context.CancelFunc) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	var sigs []os.Signal
	for _, s := range endingSignals {
		if s != syscall.SIGHUP || !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	return signal.NotifyContext(context.Background(), sigs...)
}

// untilBroken passes writes to w; the first that fails with EPIPE (what
// read pmjail's output has gone) calls gone, which cancels the run.
func untilBroken(w io.Writer, gone func()) io.Writer {
	return &pipeWatch{w: w, gone: gone}
}

type pipeWatch struct {
	w    io.Writer
	gone func()
}

func (p *pipeWatch) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		p.gone()
	}
	return n, err
}
