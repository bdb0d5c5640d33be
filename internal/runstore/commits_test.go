package runstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// TestCommitsPaced: each store write was a commit of its own, an fsync
// of the file (two fdatasyncs, measured: four for an async submission
// and its DELETE), at the rate the peers sent requests: with no tenant
// rate, any allowed peer that submitted and cancelled runs in a loop on
// many connections held the host's disk at its fsync rate. Writes that
// come together are committed together, at most one commit every
// commitEvery, so the disk's writes no longer follow the request rate.
func TestCommitsPaced(t *testing.T) {
	s, _ := open(t, t.TempDir(), roomy)
	defer s.Close()
	const writers = 200
	before := s.commits.Load()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	for i := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("run-%d", i)
			if _, err := s.Create(&Record{ID: id, Owner: "uid:1", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
				errs <- err
				return
			}
			if err := s.Finish(id, api.RunCancelled, Cancelled(id, "its owner cancelled it (DELETE)"), nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	took := time.Since(start)
	commits := s.commits.Load() - before
	if bound := int64(took/commitEvery) + 1; commits > bound {
		t.Errorf("%d writers' %d writes in %v: %d commits, want at most one every %v (%d)", writers, 2*writers, took, commits, commitEvery, bound)
	}
	t.Logf("%d writes in %v: %d commits", 2*writers, took.Round(time.Millisecond), commits)
	if n, _ := s.Stats(); n != writers {
		t.Errorf("%d runs ended, want %d", n, writers)
	}
}

// TestCommitsRefusalAlone: a write refused in a batch (an idempotency
// key given with another job, a second end) gets its refusal alone; the
// writes before and after it in the batch are committed, in order, as
// if each had been alone.
func TestCommitsRefusalAlone(t *testing.T) {
	s, _ := open(t, t.TempDir(), roomy)
	defer s.Close()
	const writers = 50
	var wg sync.WaitGroup
	made := make(chan string, writers)
	conflicts := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			// Every writer gives the same key, half with another job.
			r := &Record{ID: fmt.Sprintf("k-%d", i), Owner: "uid:1", Key: "k", Sum: fmt.Sprint(i % 2), Status: api.RunQueued, SubmittedAt: time.Now()}
			existing, err := s.Create(r)
			switch {
			case errors.Is(err, ErrKeyConflict):
				conflicts <- err
			case err != nil:
				t.Errorf("%s: %v", r.ID, err)
			case existing == nil:
				made <- r.ID
			}
		})
		wg.Go(func() {
			if _, err := s.Create(&Record{ID: fmt.Sprintf("free-%d", i), Owner: "uid:2", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
				t.Errorf("free-%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(made)
	close(conflicts)
	var ids []string
	for id := range made {
		ids = append(ids, id)
	}
	if len(ids) != 1 {
		t.Fatalf("runs made under one key: %v, want one", ids)
	}
	if n := len(conflicts); n != writers/2 {
		t.Errorf("%d conflicts, want %d (the other job's writers)", n, writers/2)
	}
	if r, err := s.Lookup("uid:1", "k"); err != nil || r == nil || r.ID != ids[0] {
		t.Errorf("the key's run: %+v %v, want %s", r, err, ids[0])
	}
	for i := range writers {
		if _, err := s.Get("uid:2", fmt.Sprintf("free-%d", i)); err != nil {
			t.Errorf("free-%d: %v", i, err)
		}
	}
}
