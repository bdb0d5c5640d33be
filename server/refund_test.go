package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/internal/clienttest"
)

// A run its own client ends before it starts spends its tenant's rate;
// one the daemon keeps from starting does not. Every run that never
// started was refunded, so a tenant whose slot was taken submitted and
// DELETEd queued async runs, or sent sync runs and hung up while they
// waited, at its request rate, each async one a stored run and an
// fsync, beyond its rate.
func TestRateSpentByRunsTheirClientEnds(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 2, "max_queue": 4, "queue_timeout": "3s", "runs": {"dir": %q},
		"tenants": [{"name": "root", "match": {"uid": 0}, "max_concurrency": 1, "max_queue": 1, "rate": "3/h"}]}`, store), sock)
	ctx := t.Context()
	loop := &api.Job{Runtime: "deno", Source: `console.log("started"); for (;;) {}`}
	// The tenant's one slot, taken for the test: the first of its rate.
	running, err := ts.c.SubmitAsync(ctx, loop, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = ts.c.CancelRun(context.Background(), running.ID) }()
	select {
	case <-clienttest.Started(ctx, ts.c, running.ID):
	case <-time.After(60 * time.Second):
		t.Fatal("the first run never started")
	}
	var apiErr *client.Error
	// The daemon's reason: a sync run that waits out the queue timeout
	// is given its token back.
	if _, err := ts.c.Run(ctx, &api.Job{Runtime: "deno", Source: "1"}); !errors.As(err, &apiErr) || apiErr.Code != codeQueueTimeout {
		t.Fatalf("a sync run behind the taken slot: %v, want 503 %s", err, codeQueueTimeout)
	}
	// The client's: an async run DELETEd while queued, the second.
	queued, err := ts.c.SubmitAsync(ctx, loop, "")
	if err != nil {
		t.Fatalf("the second run of a 3/h rate, after a queue timeout: %v", err)
	}
	if r, err := ts.c.CancelRun(ctx, queued.ID); err != nil || r.Status != api.RunCancelled || r.Result == nil || r.Result.Usage.WallMS != 0 {
		t.Fatalf("DELETE of the queued run: %+v %v", r, err)
	}
	// A sync client gone while its run waits, the third.
	gone, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := ts.c.Run(gone, &api.Job{Runtime: "deno", Source: "1"})
		done <- err
	}()
	waitFor(t, func() bool { _, q := ts.load(); return q == 1 })
	cancel()
	<-done
	waitFor(t, func() bool { return strings.Contains(ts.logs.String(), "client gone while queued") })
	// Spent: the next, whatever its kind, is over the rate.
	for i := range 3 {
		r, err := ts.c.SubmitAsync(ctx, loop, "")
		if err == nil {
			_, _ = ts.c.CancelRun(ctx, r.ID)
			t.Errorf("run %d after the rate was spent on runs their client ended: accepted, want 429 %s", 4+i, codeRateLimited)
			continue
		}
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != codeRateLimited {
			t.Fatalf("run %d over the rate: %v, want 429 %s", 4+i, err, codeRateLimited)
		}
		break
	}
}
