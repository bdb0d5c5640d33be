package runstore

import (
	"encoding/json"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/api"
)

// fullDisk makes the store's file unable to grow from now on, as a disk
// that is full would: this process may not write past the file's size
// (RLIMIT_FSIZE, whose signal it ignores, so the write fails EFBIG), until
// the test ends. Writes that fit in the pages the file has free still
// go through. The store must hold some free pages: room (below) makes them.
func fullDisk(t *testing.T, dir string) {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	capFiles(t, st.Size())
}

// capFiles makes this process unable to write past size bytes of any
// file (RLIMIT_FSIZE, whose signal it ignores, so the write fails EFBIG),
// until the test ends.
func capFiles(t *testing.T, size int64) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if old.Cur != unix.RLIM_INFINITY && old.Cur < uint64(size) {
		t.Fatalf("RLIMIT_FSIZE is %d already, below %d bytes", old.Cur, size)
	}
	signal.Ignore(syscall.SIGXFSZ)
	capped := old
	capped.Cur = uint64(size)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &capped); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
			t.Error(err)
		}
		signal.Reset(syscall.SIGXFSZ)
	})
}

// room stores and prunes a run of a MiB, leaving its pages free in the
// file: small writes then fit without growing it.
func room(t *testing.T, s *Store) {
	t.Helper()
	if _, err := s.Create(&Record{ID: "room", Owner: "uid:9", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish("room", api.RunDone, json.RawMessage(`{"id":"room","status":"ok"}`), make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(time.Now().Add(2 * time.Hour)); err != nil || n != 1 {
		t.Fatalf("pruned %d: %v", n, err)
	}
	// The pruned pages are free once a later write begins.
	if _, err := s.Create(&Record{ID: "after-room", Owner: "uid:9", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// bigEnd is a run's end of 4 MiB of output, as a guest's output makes it:
// more than the file has free.
func bigEnd(id string) (json.RawMessage, []byte) {
	out := strings.Repeat("x", 4<<20)
	res, _ := json.Marshal(map[string]any{"id": id, "status": "ok", "stdout": out})
	return res, []byte(`{"type":"stdout","data":"` + out + `"}` + "\n")
}

// TestCommitFailureAlone: the writes that come within commitEvery are
// committed in one transaction, and one that could not be stored (a run's
// end of tens of MiB of a guest's output, on a disk nearly full) failed
// them all: another peer's run's end that fitted was lost with it (its
// run stayed queued), and its submissions were refused. The transaction
// is tried again in parts: the end that does not fit fails alone.
func TestCommitFailureAlone(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Limits{Retention: time.Hour, MaxBytes: 64 << 20})
	defer s.Close()
	for _, r := range []*Record{
		{ID: "big", Owner: "uid:1", Status: api.RunQueued, SubmittedAt: time.Now()},
		{ID: "small", Owner: "uid:2", Status: api.RunQueued, SubmittedAt: time.Now()},
	} {
		if _, err := s.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	room(t, s)
	fullDisk(t, dir)

	// Both ends wait for one commit: the last is made to seem to have
	// been a second ago from now, so the first end's commit waits that
	// long, and takes the other with it.
	q := &s.writes
	q.mu.Lock()
	q.last = time.Now().Add(time.Second)
	q.mu.Unlock()
	bigRes, bigEvents := bigEnd("big")
	smallRes := json.RawMessage(`{"id":"small","status":"ok","stdout":"fits"}`)
	bigDone, smallDone := make(chan error, 1), make(chan error, 1)
	go func() { bigDone <- s.Finish("big", api.RunDone, bigRes, bigEvents) }()
	go func() {
		smallDone <- s.Finish("small", api.RunDone, smallRes, []byte(`{"type":"stdout","data":"fits"}`+"\n"))
	}()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		n := len(q.pending)
		q.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the two ends wait for the commit after a second", n)
		}
	}
	errBig, errSmall := <-bigDone, <-smallDone
	if errSmall != nil {
		t.Errorf("the end that fits: %v, want it stored", errSmall)
	}
	if errBig == nil {
		t.Errorf("the end of 4 MiB was stored past the file's size")
	}
	r, err := s.Get("uid:2", "small")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != api.RunDone || string(r.Result) != string(smallRes) {
		t.Errorf("the end that fits: %s %s, want done with its result", r.Status, r.Result)
	}
	if _, err := s.Create(&Record{ID: "later", Owner: "uid:2", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
		t.Errorf("a submission after: %v", err)
	}
}

// TestFinishNotStoredEndsTheRun: a run's end the store could not hold
// left the run queued for ever (runs not ended are never pruned), its
// owner polling for an end that never came. It is ended without its
// result and events, as an internal error that says so, and Finish says
// ErrNotStored.
func TestFinishNotStoredEndsTheRun(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Limits{Retention: time.Hour, MaxBytes: 64 << 20})
	defer s.Close()
	if _, err := s.Create(&Record{ID: "big", Owner: "uid:1", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	room(t, s)
	fullDisk(t, dir)
	res, events := bigEnd("big")
	err := s.Finish("big", api.RunDone, res, events)
	if !errors.Is(err, ErrNotStored) {
		t.Errorf("an end that does not fit: %v, want ErrNotStored", err)
	}
	r, err := s.Get("uid:1", "big")
	if err != nil {
		t.Fatal(err)
	}
	run, err := r.Run()
	if err != nil {
		t.Fatal(err)
	}
	if !run.Status.Ended() || run.Result == nil || run.Result.Status != api.StatusInternalError ||
		run.Result.Error == nil || !strings.Contains(run.Result.Error.Message, "could not store its result") {
		t.Fatalf("the run after its end did not fit: %s %s, want ended as an internal error", r.Status, r.Result)
	}
	if strings.Contains(string(r.Result), dir) {
		t.Errorf("the result names the store's file: %s", r.Result)
	}
	if ev, err := s.Events("uid:1", "big"); err != nil || len(ev) != 0 {
		t.Errorf("its events: %d bytes, %v; want none", len(ev), err)
	}
	if n, _ := s.Stats(); n != 1 {
		t.Errorf("%d finished runs counted, want 1", n)
	}
}
