package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/clienttest"
)

// A follower that attached to a run while it was live, and reads slowly
// or not at all, must not keep the run's events in the daemon's memory
// once the run has ended and the store has them: each such follower
// held its run's whole event buffer (and its result event), tens of
// megabytes for a run of control characters, for as long as it kept
// reading a chunk within each write's deadline. A peer's connections,
// one per ended run, then held gigabytes.
func TestAsyncEndedRunNotHeldByFollowers(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "max_queue": 8, "others_max_queue": 8, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	// One slot, taken: the runs below wait queued, and their followers
	// attach while they are live, deterministically.
	blocker, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("started"); for (;;) {}`}, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-clienttest.Started(ctx, ts.c, blocker.ID):
	case <-time.After(60 * time.Second):
		t.Fatal("the blocking run never started")
	}
	const n = 4
	const bound = 24 << 20
	base := heap()
	var ids []string
	for range n {
		// 2 MiB of \x01: about 12 MiB of events, and as much again in
		// the result event.
		r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("\x01".repeat(2 << 20))`, Limits: api.Limits{Output: 8 << 20}}, "")
		if err != nil {
			t.Fatal(err)
		}
		followers(t, sock, r.ID, 1) // attached while queued; never read
		ids = append(ids, r.ID)
	}
	if _, err := ts.c.CancelRun(ctx, blocker.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if res, err := ts.c.RunEvents(ctx, id, nil); err != nil || res.Status != api.StatusOK {
			t.Fatalf("run %s: %v %v", id, res, err)
		}
		if run, err := ts.c.GetRun(ctx, id); err != nil || run.Status != api.RunDone {
			t.Fatalf("run %s: %v %v, want done", id, run, err)
		}
	}
	grown := int64(heap()) - int64(base)
	t.Logf("heap grew %d KiB", grown>>10)
	if grown > bound {
		t.Errorf("%d ended runs, each with an unread follower that attached while it was live: the heap grew %d MiB, want under %d MiB",
			n, grown>>20, bound>>20)
	}
}
