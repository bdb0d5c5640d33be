package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
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

// followers opens n event streams of run id over raw connections and
// reads each one's header alone, then leaves them unread: a client that
// follows a run and stops reading. It returns the responses.
func followers(t *testing.T, sock, id string, n int) []*http.Response {
	t.Helper()
	var out []*http.Response
	for range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "GET /v1/runs/%s/events HTTP/1.1\r\nHost: pmjail\r\n\r\n", id); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("follow %s: %v %v", id, resp, err)
		}
		out = append(out, resp)
	}
	return out
}

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Each follower of a run's events that stops reading holds a bounded
// chunk of them, not a copy of them all: a run that prints a few
// megabytes of control characters (six bytes each in its events) and a
// peer's connections following it, unread, must not take the daemon's
// memory, while the run is live or after it ended.
func TestAsyncEventFollowersBoundedMemory(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	// 6 MiB of "a, 9 MiB of events as JSON (a quote is two bytes
	// escaped, and the output stays text); then it waits to be cancelled.
	src := `console.log('"a'.repeat(3 << 20)); await new Promise((r) => setTimeout(r, 120000));`
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: src, Limits: api.Limits{Output: 8 << 20, Timeout: api.Duration(2 * time.Minute)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	// One reader sees the output whole: the run is past its print.
	sc := bufio.NewScanner(followers(t, sock, r.ID, 1)[0].Body)
	sc.Buffer(nil, 64<<20)
	got := 0
	for got < 3<<20 && sc.Scan() {
		var ev api.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == api.EventStdout {
			got += strings.Count(ev.Data, `"a`)
		}
	}
	if got < 3<<20 {
		t.Fatalf("the first follower saw %d of the output: %v", got, sc.Err())
	}
	if run, err := ts.c.GetRun(ctx, r.ID); err != nil || run.Status != api.RunRunning {
		t.Fatalf("the run, once printed: %+v %v, want it running", run, err)
	}
	const n = 8
	const bound = 24 << 20
	base := heap()
	followers(t, sock, r.ID, n)
	grown := int64(heap()) - int64(base)
	t.Logf("heap grew %d KiB", grown>>10)
	if grown > bound {
		t.Errorf("%d unread followers of a live run: the heap grew %d MiB, want under %d MiB", n, grown>>20, bound>>20)
	}
	if _, err := ts.c.CancelRun(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	base = heap()
	followers(t, sock, r.ID, n)
	grown = int64(heap()) - int64(base)
	t.Logf("heap grew %d KiB", grown>>10)
	if grown > bound {
		t.Errorf("%d unread followers of an ended run: the heap grew %d MiB, want under %d MiB", n, grown>>20, bound>>20)
	}
}

// The runs section's retention and size cap apply at a reload, as the
// config says: an operator who lowers runs.max_bytes as the disk fills,
// or runs.retention, sees the store pruned to them at once.
func TestAsyncRunsReload(t *testing.T) {
	sock, store := asyncDirs(t)
	cfgJSON := `{"version": 1, "ceiling": {"limits": {"output": "50K"}}, "runs": {"dir": %q, "retention": %q, "max_bytes": %q}}`
	ts := startServerAt(t, fmt.Sprintf(cfgJSON, store, "1h", "64M"), sock)
	ctx := context.Background()
	var ids []string
	for range 2 {
		r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("x".repeat(40000))`}, "")
		if err != nil {
			t.Fatal(err)
		}
		if res, err := ts.c.RunEvents(ctx, r.ID, nil); err != nil || res.Status != api.StatusOK {
			t.Fatalf("%+v %v", res, err)
		}
		ids = append(ids, r.ID)
	}
	reload := func(retention, maxBytes string) {
		t.Helper()
		cfg, err := ParseConfig(strings.NewReader(fmt.Sprintf(cfgJSON, store, retention, maxBytes)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Socket.Path = sock
		if err := ts.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	// Room for one run alone: the older goes.
	reload("1h", "100K")
	if n, b := ts.async.store.Stats(); n != 1 || b > 100<<10 {
		t.Errorf("after a reload to max_bytes 100K: %d runs, %d bytes; want 1 within the cap", n, b)
	}
	if _, err := ts.c.GetRun(ctx, ids[1]); err != nil {
		t.Errorf("the newest run: %v", err)
	}
	// A retention shorter than the run's age: it goes at the next prune.
	reload("1ms", "100K")
	ts.async.prune(time.Now())
	if n, _ := ts.async.store.Stats(); n != 0 {
		t.Errorf("after a reload to retention 1ms: %d runs kept, want 0", n)
	}
}

// The same for GET /v1/runs/{id} of an ended run with a large result:
// each unread answer held the whole result, decoded and encoded again,
// with no deadline. It is written a chunk at a time from the store, and
// says the same as the client reads it whole.
func TestAsyncResultReadersBoundedMemory(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log('"a'.repeat(3 << 20) + "<&>")`,
		Limits: api.Limits{Output: 8 << 20}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ts.c.RunEvents(ctx, r.ID, nil); err != nil || res.Status != api.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	run, err := ts.c.GetRun(ctx, r.ID)
	if err != nil || run.Status != api.RunDone || run.ID != r.ID || run.Result == nil ||
		run.Result.Stdout != strings.Repeat(`"a`, 3<<20)+"<&>\n" || run.Result.Encoding.Stdout != "" || run.SubmittedAt.IsZero() {
		t.Fatalf("the run read whole, its stdout as text: %v %v", run != nil, err)
	}
	const n = 8
	const bound = 24 << 20
	base := heap()
	var held []net.Conn
	for range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "GET /v1/runs/%s HTTP/1.1\r\nHost: pmjail\r\n\r\n", r.ID); err != nil {
			t.Fatal(err)
		}
		if resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %v %v", resp, err)
		}
		held = append(held, c)
	}
	grown := int64(heap()) - int64(base)
	t.Logf("heap grew %d KiB", grown>>10)
	if grown > bound {
		t.Errorf("%d unread answers of a run: the heap grew %d MiB, want under %d MiB", len(held), grown>>20, bound>>20)
	}
}
