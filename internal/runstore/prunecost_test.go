package runstore

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pmjail/pmjail/api"
)

// A peer of no rate fills the store with its smallest runs (submitted
// async and cancelled at once: 490 bytes each, half a million under the
// default 256M cap). Each run's end, any owner's, prunes: that pruning
// listed every run kept, and sorted them over the cap, under the store's
// lock: each end allocated 32 MiB with 100,000 runs kept (5 ms of the
// lock at 20,000), growing with them to the half million, and every
// owner's async runs ended at that pace. A run's end must cost the store
// about the same however many runs it keeps.
func TestPruneCostDoesNotGrowWithTheRunsKept(t *testing.T) {
	const kept = 100_000
	dir := t.TempDir()
	s, _ := open(t, dir, Limits{Retention: time.Hour, MaxBytes: 1 << 30})
	// The flood, written in one transaction (its 200,000 fsyncs, one at
	// a time, are not what is tested), then counted as a restart does.
	at := time.Now().Add(-time.Minute).UTC()
	var size int64
	if err := s.update(func(tx *bolt.Tx) error {
		for i := range kept {
			id := fmt.Sprintf("%016x", i)
			n, err := putRecord(tx.Bucket(bucketRuns), &Record{ID: id, Owner: "uid:1000", Status: api.RunCancelled,
				SubmittedAt: at, EndedAt: at.Add(time.Duration(i) * time.Microsecond), Result: Cancelled(id, "its owner cancelled it (DELETE)")})
			if err != nil {
				return err
			}
			size += n
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = open(t, dir, Limits{Retention: time.Hour, MaxBytes: 1 << 30})
	defer s.Close()
	if n, b := s.Stats(); n != kept || b != size {
		t.Fatalf("kept %d runs of %d bytes, want %d of %d", n, b, kept, size)
	}
	end := func(id string) uint64 {
		t.Helper()
		if _, err := s.Create(&Record{ID: id, Owner: "tenant:ci", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := s.Finish(id, api.RunDone, []byte(`{"id":"`+id+`","status":"ok"}`), nil); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	under := end("under-the-cap")
	// At the cap: each end prunes the flood's oldest.
	if _, err := s.SetLimits(Limits{Retention: time.Hour, MaxBytes: size}, time.Now()); err != nil {
		t.Fatal(err)
	}
	over := end("over-the-cap")
	t.Logf("with %d runs kept, a run's end allocated %d KiB under the cap, %d KiB over it", kept, under>>10, over>>10)
	for what, n := range map[string]uint64{"under the cap": under, "over the cap": over} {
		if n > 2<<20 {
			t.Errorf("%s, with %d runs kept: a run's end allocated %d MiB, want it to cost about what it does in an empty store", what, kept, n>>20)
		}
	}
	if _, err := s.Get("uid:1000", fmt.Sprintf("%016x", 0)); err == nil {
		t.Errorf("the flood's oldest run kept past the cap")
	}
	if _, err := s.Get("tenant:ci", "over-the-cap"); err != nil {
		t.Errorf("the run that ended over the cap: %v, want kept", err)
	}
}

// Runs ending at once, each pruning, leave the accounting as the file
// is: every run counted is stored, with its size, and no stored run
// that ended is uncounted (it would never be pruned).
func TestPruneAccountingUnderConcurrentEnds(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Limits{Retention: time.Hour, MaxBytes: 16 << 10})
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				id := fmt.Sprintf("g%d-%02d", g, i)
				if _, err := s.Create(&Record{ID: id, Owner: fmt.Sprintf("uid:%d", g%3), Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
					t.Error(err)
					return
				}
				if err := s.Finish(id, api.RunDone, []byte(`{"id":"`+id+`"}`), make([]byte, 100+g*97+i*13)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	stored := map[string]int64{}
	if err := s.view(func(tx *bolt.Tx) error {
		events := tx.Bucket(bucketEvents)
		return tx.Bucket(bucketRuns).ForEach(func(k, v []byte) error {
			stored[string(k)] = int64(len(v) + len(events.Get(k)))
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range stored {
		total += n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ended) != len(stored) || s.bytes != total || total > 16<<10 {
		t.Errorf("counted %d runs of %d bytes; the file holds %d of %d (cap %d)", len(s.ended), s.bytes, len(stored), total, 16<<10)
	}
	var owned int
	for id, k := range s.ended {
		if stored[id] != k.size {
			t.Errorf("run %s counted as %d bytes, stored as %d", id, k.size, stored[id])
		}
	}
	for _, o := range s.owners {
		owned += len(o.runs)
	}
	if owned != len(s.ended) {
		t.Errorf("%d runs by owner, %d by id", owned, len(s.ended))
	}
}

// A daemon's start reads every run the store keeps, to count the
// finished ones: it decoded each record whole, its result copied and
// scanned, so that a store at its cap (256M by default, results of tens
// of MiB each) cost the start as much again in garbage. What it counts
// is each record's head.
func TestOpenDoesNotCopyTheResults(t *testing.T) {
	dir := t.TempDir()
	const runs, result = 8, 8 << 20
	s, _ := open(t, dir, Limits{Retention: time.Hour, MaxBytes: 1 << 30})
	big := make([]byte, 0, result+16)
	big = append(big, `{"stdout":"`...)
	for len(big) < result {
		big = append(big, 'x')
	}
	big = append(big, `"}`...)
	for i := range runs {
		id := fmt.Sprintf("big-%d", i)
		if _, err := s.Create(&Record{ID: id, Owner: "tenant:ci", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(id, api.RunDone, big, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Compacted now, if its free pages are most of it: the start would
	// do it, copying the results once, which is not what is measured.
	if _, err := s.Prune(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s, _ = open(t, dir, Limits{Retention: time.Hour, MaxBytes: 1 << 30})
	runtime.ReadMemStats(&after)
	defer s.Close()
	if n, _ := s.Stats(); n != runs {
		t.Fatalf("counted %d runs, want %d", n, runs)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 8<<20 {
		t.Errorf("opening a store of %d results of %d MiB allocated %d MiB, want the records' heads alone", runs, result>>20, grown>>20)
	}
}
