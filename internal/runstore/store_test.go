package runstore

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

func open(t *testing.T, dir string, lim Limits) (*Store, int) {
	t.Helper()
	s, lost, err := Open(dir, lim, "the daemon restarted")
	if err != nil {
		t.Fatal(err)
	}
	return s, lost
}

var roomy = Limits{Retention: time.Hour, MaxBytes: 1 << 20}

// A store reopened ends the runs left unfinished as cancelled, keeps the
// finished ones, and keeps each run its owner's.
func TestReopenEndsUnfinished(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, roomy)
	now := time.Now().UTC()
	for _, r := range []*Record{
		{ID: "done", Owner: "uid:1", Status: api.RunQueued, SubmittedAt: now},
		{ID: "running", Owner: "uid:1", Status: api.RunQueued, SubmittedAt: now},
		{ID: "queued", Owner: "uid:1", Status: api.RunQueued, SubmittedAt: now},
	} {
		if _, err := s.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finish("done", api.RunDone, json.RawMessage(`{"id":"done","status":"ok"}`), []byte(`{"type":"stdout","data":"x"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish("done", api.RunCancelled, nil, nil); !errors.Is(err, ErrEnded) {
		t.Errorf("a second end: %v, want ErrEnded", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, lost := open(t, dir, roomy)
	defer s.Close()
	if lost != 2 {
		t.Errorf("lost %d, want 2", lost)
	}
	for _, id := range []string{"running", "queued"} {
		r, err := s.Get("uid:1", id)
		if err != nil {
			t.Fatal(err)
		}
		run, err := r.Run()
		if err != nil || run.Status != api.RunCancelled || run.Result.Status != api.StatusCancelled || !strings.Contains(run.Result.Error.Message, "daemon restarted") {
			t.Errorf("%s after reopening: %+v %v", id, run, err)
		}
	}
	if r, err := s.Get("uid:1", "done"); err != nil || r.Status != api.RunDone {
		t.Errorf("done after reopening: %+v %v", r, err)
	}
	if ev, err := s.Events("uid:1", "done"); err != nil || !strings.Contains(string(ev), `"data":"x"`) {
		t.Errorf("events after reopening: %q %v", ev, err)
	}
	if _, err := s.Get("uid:2", "done"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner's get: %v, want ErrNotFound", err)
	}
	if n, _ := s.Stats(); n != 3 {
		t.Errorf("%d finished runs counted, want 3", n)
	}
}

// A key names one run per owner; another job under it is a conflict; a
// pruned run frees its key.
func TestKeys(t *testing.T) {
	s, _ := open(t, t.TempDir(), Limits{Retention: time.Minute, MaxBytes: 1 << 20})
	defer s.Close()
	first := &Record{ID: "a", Owner: "uid:1", Key: "k", Sum: "s1", Status: api.RunQueued}
	if ex, err := s.Create(first); ex != nil || err != nil {
		t.Fatal(ex, err)
	}
	if ex, err := s.Create(&Record{ID: "b", Owner: "uid:1", Key: "k", Sum: "s1"}); err != nil || ex == nil || ex.ID != "a" {
		t.Errorf("same key and job: %+v %v, want run a", ex, err)
	}
	if ex, err := s.Create(&Record{ID: "c", Owner: "uid:1", Key: "k", Sum: "s2"}); !errors.Is(err, ErrKeyConflict) || ex == nil || ex.ID != "a" {
		t.Errorf("another job: %+v %v, want ErrKeyConflict naming run a", ex, err)
	}
	if ex, err := s.Create(&Record{ID: "d", Owner: "uid:2", Key: "k", Sum: "s2"}); ex != nil || err != nil {
		t.Errorf("another owner's key: %+v %v", ex, err)
	}
	if err := s.Finish("a", api.RunDone, json.RawMessage(`{}`), nil); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if r, err := s.Lookup("uid:1", "k"); r != nil || err != nil {
		t.Errorf("the key of a pruned run: %+v %v, want free", r, err)
	}
}

// A store another daemon holds was refused as "run store PATH: timeout",
// which told the operator neither what waited nor on whom.
func TestOpenSaysWhoHoldsTheStore(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, roomy)
	defer s.Close()
	_, _, err := Open(dir, roomy, "")
	if err == nil || !strings.Contains(err.Error(), "another process holds the file's lock") || !strings.Contains(err.Error(), "runs.dir") {
		t.Errorf("a store held by another: %v, want it to say so", err)
	}
}

func TestOpenRefusesBadLimits(t *testing.T) {
	if _, _, err := Open(t.TempDir(), Limits{Retention: 0, MaxBytes: 1}, ""); err == nil {
		t.Error("a zero retention was taken")
	}
}
