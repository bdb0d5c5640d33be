package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/runstore"
)

// A run store damaged on disk (here: its pages cut off, on which bbolt
// panics as it opens) neither crashes the daemon nor keeps it down: it
// starts, says so in its log, keeps the file aside, and runs async again.
func TestAsyncDamagedStoreStarts(t *testing.T) {
	sock, store := asyncDirs(t)
	s, _, err := runstore.Open(store, runstore.Limits{Retention: time.Hour, MaxBytes: 1 << 20}, "lost")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := s.Create(&runstore.Record{ID: fmt.Sprintf("old%02d", i), Owner: "uid:0", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(store, runstore.FileName), 3*4096); err != nil {
		t.Fatal(err)
	}

	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	if !strings.Contains(ts.logs.String(), "async run store was damaged") {
		t.Errorf("the log does not tell of the damaged store:\n%s", ts.logs.String())
	}
	aside, _ := filepath.Glob(filepath.Join(store, runstore.FileName+".damaged-*"))
	if len(aside) != 1 {
		t.Errorf("damaged file set aside: %v, want one", aside)
	}
	ctx := context.Background()
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("fresh")`}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ts.c.RunEvents(ctx, r.ID, nil); err != nil || res.Status != api.StatusOK || !strings.Contains(res.Stdout, "fresh") {
		t.Fatalf("async run on the new store: %+v %v", res, err)
	}
}
