package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
)

// TestShutdownAnswersAQueuedSyncRun: a sync run still waiting for its
// slot when a shutdown's grace period ends had its wait cut by the
// shutdown's cancellation, which the handler took for its client
// hanging up: it answered nothing, and the client, which stayed, read a
// closed connection (EOF). It must be answered 503 draining, the
// shutdown named; the run in its slot is cancelled, answered, as
// before. So must a ?refresh=1 waiting for its slot, which answered
// 200 with no body.
func TestShutdownAnswersAQueuedSyncRun(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "max_queue": 4, "queue_timeout": "5m"}`)
	type answer struct {
		res *api.Result
		err error
	}
	running, queued := make(chan answer, 1), make(chan answer, 1)
	run := func(out chan<- answer) {
		res, err := ts.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `await new Promise(r => setTimeout(r, 60000))`})
		out <- answer{res, err}
	}
	go run(running)
	waitFor(t, func() bool { r, _, _, _ := ts.lim.stats(); return r == 1 })
	go run(queued)
	others := ts.state.Load().others
	waitFor(t, func() bool { _, q, _, _ := others.share.lim.stats(); return q == 1 })
	// The daemon's own uid's ?refresh=1, waiting for a global slot.
	refresh := make(chan [2]any, 1)
	go func() {
		status, code := ts.getPosture(t, "refresh=1")
		refresh <- [2]any{status, code}
	}()
	waitFor(t, func() bool { _, q, _, _ := ts.lim.stats(); return q == 1 })
	if err := ts.Shutdown(time.Second); err != nil {
		t.Fatal(err)
	}
	if a := <-running; a.err != nil || a.res.Status != api.StatusCancelled {
		t.Errorf("the run in its slot: %v %+v, want it cancelled, answered", a.err, a.res)
	}
	a := <-queued
	if ce, ok := errors.AsType[*client.Error](a.err); !ok || ce.StatusCode != http.StatusServiceUnavailable || ce.Code != "draining" || !strings.Contains(ce.Message, "shut down") {
		t.Errorf("a sync run still queued at the end of the grace: %v %+v, want 503 draining", a.err, a.res)
	}
	if r := <-refresh; r[0] != http.StatusServiceUnavailable || r[1] != codeDraining {
		t.Errorf("a posture refresh still queued at the end of the grace: %v %q, want 503 draining", r[0], r[1])
	}
}

// TestDrainStartsNoQueuedSyncRun: a sync run queued when a shutdown
// begins must not take a slot freed during the grace period: a
// draining daemon starts no new work (async runs already were held
// back). It was started and ran to its result; it must be answered
// 503 draining, while the run that held the slot before ends as its
// own.
func TestDrainStartsNoQueuedSyncRun(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "max_queue": 4, "queue_timeout": "5m"}`)
	type answer struct {
		res *api.Result
		err error
	}
	holderCtx, cutHolder := context.WithCancel(context.Background())
	defer cutHolder()
	holder, queued := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := ts.c.Run(holderCtx, &api.Job{Runtime: "deno", Source: `await new Promise(r => setTimeout(r, 60000))`})
		holder <- answer{res, err}
	}()
	waitFor(t, func() bool { r, _, _, _ := ts.lim.stats(); return r == 1 })
	go func() {
		res, err := ts.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `console.log("started")`})
		queued <- answer{res, err}
	}()
	others := ts.state.Load().others
	waitFor(t, func() bool { _, q, _, _ := others.share.lim.stats(); return q == 1 })
	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(time.Minute) }()
	waitFor(t, ts.draining.Load)
	// The holder's client hangs up: its run is cancelled and its slot
	// frees within the grace period.
	cutHolder()
	<-holder
	a := <-queued
	if ce, ok := errors.AsType[*client.Error](a.err); !ok || ce.StatusCode != http.StatusServiceUnavailable || ce.Code != codeDraining {
		t.Errorf("a sync run queued as the drain began: %v %+v, want 503 draining, not started", a.err, a.res)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// TestShutdownAnswersARefreshInItsProbe: a ?refresh=1 whose probe was
// still running when a shutdown's grace period ended took the cut for
// its client hanging up and returned without a word: net/http sent a
// bodiless 200, read as a posture by a client. It must be 503 draining,
// JSON, as the other refusals of a shutdown.
func TestShutdownAnswersARefreshInItsProbe(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	refresh := make(chan [2]any, 1)
	go func() {
		status, code := ts.getPosture(t, "refresh=1")
		refresh <- [2]any{status, code}
	}()
	// The refresh's own probe is running (the one at start has ended:
	// New waited for it).
	waitFor(t, func() bool {
		select {
		case <-ts.opt.Prober.Idle():
			return false
		default:
			return true
		}
	})
	// A probe starts jails and children, far longer than a grace of a
	// nanosecond: the cut comes while it runs.
	if err := ts.Shutdown(time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	r := <-refresh
	if r[0] != http.StatusServiceUnavailable || r[1] != codeDraining {
		t.Errorf("a posture refresh whose probe a shutdown cut: %v %q, want 503 draining", r[0], r[1])
	}
}
