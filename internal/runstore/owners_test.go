package runstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// The size cap is the whole store's, and owners share it: one owner
// (a tenant, or a peer of none) that finishes many large runs must not
// prune another owner's few small ones before their retention. Over the
// cap, the owner that keeps the most bytes loses its oldest run first;
// the cap prunes as before an owner that is alone in the store.
func TestPruneBySizeTakesFromTheLargestOwner(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Limits{Retention: time.Hour, MaxBytes: 64 << 10})
	defer s.Close()
	finish := func(owner, id string, events int) {
		t.Helper()
		if _, err := s.Create(&Record{ID: id, Owner: owner, Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		ev := []byte(`{"type":"stdout","data":"` + strings.Repeat("x", events) + `"}` + "\n")
		if err := s.Finish(id, api.RunDone, json.RawMessage(`{"id":"`+id+`","status":"ok"}`), ev); err != nil {
			t.Fatal(err)
		}
	}
	finish("tenant:a", "a-old", 1<<10)
	finish("tenant:a", "a-new", 1<<10)
	// Another owner's flood: 20 runs of 8 KiB, more than twice the cap.
	var flood []string
	for i := range 20 {
		id := fmt.Sprintf("b-%02d", i)
		finish("tenant:b", id, 8<<10)
		flood = append(flood, id)
	}
	for _, id := range []string{"a-old", "a-new"} {
		if _, err := s.Get("tenant:a", id); err != nil {
			t.Errorf("tenant a's run %s after tenant b's flood: %v, want kept", id, err)
		}
	}
	if _, err := s.Get("tenant:b", flood[len(flood)-1]); err != nil {
		t.Errorf("the flood's newest run: %v, want kept", err)
	}
	if _, err := s.Get("tenant:b", flood[0]); err == nil {
		t.Errorf("the flood's oldest run kept; want it pruned")
	}
	if _, b := s.Stats(); b > 64<<10 {
		t.Errorf("store at %d bytes, over its cap", b)
	}
	// Alone, an owner's oldest goes first, as ever.
	if _, err := s.SetLimits(Limits{Retention: time.Hour, MaxBytes: 2 << 10}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("tenant:a", "a-new"); err != nil {
		t.Errorf("a-new: %v, want kept", err)
	}
	if _, err := s.Get("tenant:a", "a-old"); err == nil {
		t.Errorf("a-old kept; want it pruned, the oldest of the largest owner")
	}
}

// Head and Lookup read a record without its result, also one whose key
// holds the result field's own text (quoted in the record, so never
// taken for the field).
func TestHeadLeavesOutTheResult(t *testing.T) {
	s, _ := open(t, t.TempDir(), roomy)
	defer s.Close()
	key := `k,"result":{"x":1}`
	if _, err := s.Create(&Record{ID: "r1", Owner: "uid:1", Key: key, Sum: "s", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Head("uid:1", "r1"); err != nil || r.Key != key || r.Status != api.RunQueued || r.Result != nil {
		t.Fatalf("head of a queued run: %+v %v", r, err)
	}
	if err := s.Finish("r1", api.RunDone, json.RawMessage(`{"id":"r1","status":"ok","stdout":"big"}`), nil); err != nil {
		t.Fatal(err)
	}
	for what, get := range map[string]func() (*Record, error){
		"head":   func() (*Record, error) { return s.Head("uid:1", "r1") },
		"lookup": func() (*Record, error) { return s.Lookup("uid:1", key) },
	} {
		r, err := get()
		if err != nil || r.ID != "r1" || r.Key != key || r.Sum != "s" || r.Status != api.RunDone || r.EndedAt.IsZero() || r.Result != nil {
			t.Errorf("%s of an ended run: %+v %v", what, r, err)
		}
	}
	if _, err := s.Head("uid:2", "r1"); err == nil {
		t.Errorf("another owner's head: found")
	}
	if r, err := s.Get("uid:1", "r1"); err != nil || string(r.Result) != `{"id":"r1","status":"ok","stdout":"big"}` {
		t.Errorf("Get keeps the result: %+v %v", r, err)
	}
}

// A key that is not UTF-8 is refused: the record's JSON would hold
// another key (U+FFFD for each bad byte) than the keys bucket, and the
// prune that ends the run would leave the real one there for ever.
func TestCreateRefusesKeyNotUTF8(t *testing.T) {
	s, _ := open(t, t.TempDir(), roomy)
	defer s.Close()
	if _, err := s.Create(&Record{ID: "r1", Owner: "uid:1", Key: "k\xff\xfe", Status: api.RunQueued, SubmittedAt: time.Now()}); err == nil {
		t.Fatal("a key that is not UTF-8: stored")
	}
	if _, err := s.Head("uid:1", "r1"); err == nil {
		t.Error("the refused run was stored")
	}
	if r, err := s.Lookup("uid:1", "k\xff\xfe"); r != nil || err != nil {
		t.Errorf("the refused key: %+v %v", r, err)
	}
}

// A new run is never written over a stored one of the same id (another
// owner's, perhaps): Create refuses it, and CreateAll, a batch's single
// write, stores all its runs or none.
func TestCreateNeverWritesOverARun(t *testing.T) {
	s, _ := open(t, t.TempDir(), roomy)
	defer s.Close()
	now := time.Now()
	if _, err := s.Create(&Record{ID: "r1", Owner: "tenant:a", Status: api.RunQueued, SubmittedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(&Record{ID: "r1", Owner: "tenant:b", Status: api.RunQueued, SubmittedAt: now}); !errors.Is(err, ErrIDTaken) {
		t.Errorf("a second run r1: %v, want ErrIDTaken", err)
	}
	if _, err := s.Head("tenant:a", "r1"); err != nil {
		t.Errorf("tenant a's run after another's of the same id: %v", err)
	}
	err := s.CreateAll([]*Record{
		{ID: "r2", Owner: "tenant:b", Status: api.RunQueued, SubmittedAt: now},
		{ID: "r1", Owner: "tenant:b", Status: api.RunQueued, SubmittedAt: now},
	})
	if !errors.Is(err, ErrIDTaken) {
		t.Errorf("a batch holding a stored id: %v, want ErrIDTaken", err)
	}
	if _, err := s.Head("tenant:b", "r2"); err == nil {
		t.Error("a batch refused in part stored its other run")
	}
	if err := s.CreateAll([]*Record{{ID: "r3", Owner: "tenant:b", Status: api.RunQueued, SubmittedAt: now}, {ID: "r4", Owner: "tenant:b", Status: api.RunQueued, SubmittedAt: now}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r3", "r4"} {
		if _, err := s.Head("tenant:b", id); err != nil {
			t.Errorf("batch run %s: %v", id, err)
		}
	}
}
