package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
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
	blocker := takeTheSlot(ctx, t, ts)
	const n = 4
	const bound = 24 << 20
	base := heap()
	var ids []string
	for range n {
		// 6 MiB of "a: 9 MiB of events as JSON (a quote is two bytes
		// escaped, and the output stays text), and as much again in
		// the result event.
		r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log('"a'.repeat(3 << 20))`, Limits: api.Limits{Output: 8 << 20}}, "")
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

// One peer's large async runs must not push another owner's results out
// of the store before their retention: runs.max_bytes is the whole
// store's, and a peer of no tenant (here uid 4243) that floods it with
// large outputs pruned, oldest first, every other owner's runs. Over the
// cap the owner keeping the most bytes now loses its own oldest.
func TestAsyncStoreCapNotSharedAway(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "socket": {"mode": "0666"}, "allow": {"uids": [4243]},
		"ceiling": {"limits": {"output": "100K"}}, "runs": {"dir": %q, "retention": "1h", "max_bytes": "200K"}}`, store), sock)
	ctx := context.Background()
	mine, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("mine")`}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ts.c.RunEvents(ctx, mine.ID, nil); err != nil || res.Status != api.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	// uid 4243: four runs of about 80K each (output kept twice), over
	// 300K in all, each followed to its end.
	for range 4 {
		out := curlAsArgs(t, 4243, "-s", "-H", "Prefer: respond-async", "-H", "Content-Type: application/json",
			"-d", `{"runtime": "deno", "source": "console.log(\"x\".repeat(40000))"}`, "--unix-socket", sock, "http://pmjail/v1/runs")
		var run api.Run
		if err := json.Unmarshal([]byte(out), &run); err != nil || run.ID == "" {
			t.Fatalf("uid 4243's submission: %s", out)
		}
		if events := curlAsArgs(t, 4243, "-s", "--unix-socket", sock, "http://pmjail/v1/runs/"+run.ID+"/events"); !strings.Contains(events, `"type":"result"`) {
			t.Fatalf("uid 4243's run %s: %.200s", run.ID, events)
		}
	}
	if _, b := ts.async.store.Stats(); b > 200<<10 {
		t.Errorf("store at %d bytes, over its cap", b)
	}
	if run, err := ts.c.GetRun(ctx, mine.ID); err != nil || run.Status != api.RunDone || run.Result.Stdout != "mine\n" {
		t.Errorf("my run after another peer filled the store: %+v %v, want it kept", run, err)
	}
}

// A run larger than runs.max_bytes alone is pruned as it ends: a
// follower that attached while it was live still gets its events and
// result (from the daemon's memory, as the store no longer has them).
// The cap is twice the output ceiling, the least a config may set: a
// run that writes its ceiling on both streams is over it.
func TestAsyncFollowerOfRunOverTheCap(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "ceiling": {"limits": {"output": "5K"}}, "runs": {"dir": %q, "max_bytes": "10K"}}`, store), sock)
	ctx := context.Background()
	blocker := takeTheSlot(ctx, t, ts)
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("x".repeat(5000)); console.error("y".repeat(5000))`}, "")
	if err != nil {
		t.Fatal(err)
	}
	body := followers(t, sock, r.ID, 1)[0].Body // attached while queued
	if _, err := ts.c.CancelRun(ctx, blocker.ID); err != nil {
		t.Fatal(err)
	}
	var last api.Event
	dec := json.NewDecoder(body)
	for dec.More() {
		if err := dec.Decode(&last); err != nil {
			t.Fatal(err)
		}
	}
	if last.Type != api.EventResult || last.Result == nil || last.Result.Status != api.StatusOK || len(last.Result.Stdout) != 5001 || len(last.Result.Stderr) != 5001 {
		t.Fatalf("the follower's last event: %+v", last)
	}
}

// An Idempotency-Key on a sync run was ignored: the job ran, and a
// client retrying it under the same key (after a timeout, say) ran it
// again, believing the key made that safe. It is refused, naming the
// header, before anything runs.
func TestSyncRunRefusesIdempotencyKey(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	hc := &http.Client{Transport: checkedTransport(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}})}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, "http://pmjail/v1/runs", strings.NewReader(`{"runtime": "deno", "source": "console.log('ran')"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.IdempotencyKey, "charge-42")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body api.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusBadRequest ||
		body.Error.Field != api.IdempotencyKey || !strings.Contains(body.Error.Message, "respond-async") {
		t.Errorf("a sync run with an Idempotency-Key: %d %+v %v, want 400 naming the header", resp.StatusCode, body, err)
	}
	if m, err := ts.c.Metrics(context.Background()); err != nil || !strings.Contains(m, `pmjail_runs_total{runtime="deno",status="ok",tenant="others"} 0`) {
		t.Errorf("a run was counted: %v", err)
	}
}

// A DELETE whose lookup of the run raced the run's end found it queued
// and no longer live, and answered "queued", with no result, as if the
// run were still waiting, though it had ended (a GET the same). The
// answer is the run as it ended.
func TestAsyncAnswerAfterTheEndRaced(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("done")`}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ts.c.RunEvents(ctx, r.ID, nil); err != nil || res.Status != api.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	// The record as DELETE's lookup read it just before the run ended.
	owner := "uid:0"
	stale, err := ts.async.store.Get(owner, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	stale.Status, stale.Result = api.RunQueued, nil
	rec := httptest.NewRecorder()
	ts.cancelAsync(rec, httptest.NewRequest(http.MethodDelete, "/v1/runs/"+r.ID, nil), owner, stale)
	var run api.Run
	if err := json.Unmarshal(rec.Body.Bytes(), &run); err != nil || run.Status != api.RunDone || run.Result == nil || run.Result.Stdout != "done\n" {
		t.Errorf("DELETE after the end raced its lookup: %d %s, want the run done with its result", rec.Code, rec.Body.String())
	}
}

// The same keyed submission again, of a run that ended with a large
// result, was answered with the whole run decoded and encoded at once,
// with no write deadline: each connection that sent it and read nothing
// held the result about three times over, for ever, at no cost to its
// rate. It is written from the store a chunk at a time, as a GET's.
func TestAsyncKeyedAgainBoundedMemory(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	job := &api.Job{Runtime: "deno", Source: `console.log('"a'.repeat(3 << 20) + "<&>")`, Limits: api.Limits{Output: 8 << 20}}
	r, err := ts.c.SubmitAsync(ctx, job, "big-1")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ts.c.RunEvents(ctx, r.ID, nil); err != nil || res.Status != api.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	again, err := ts.c.SubmitAsync(ctx, job, "big-1")
	if err != nil || again.ID != r.ID || again.Status != api.RunDone || again.Result == nil ||
		again.Result.Stdout != strings.Repeat(`"a`, 3<<20)+"<&>\n" || again.SubmittedAt.IsZero() {
		t.Fatalf("the keyed submission again, read whole: %v %v", again != nil, err)
	}
	body, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	const bound = 24 << 20
	base := heap()
	for range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "POST /v1/runs HTTP/1.1\r\nHost: pmjail\r\nPrefer: respond-async\r\nIdempotency-Key: big-1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
		if err != nil || resp.StatusCode != http.StatusAccepted || resp.Header.Get("Location") != "/v1/runs/"+r.ID {
			t.Fatalf("keyed again: %v %v", resp, err)
		}
	}
	grown := int64(heap()) - int64(base)
	t.Logf("heap grew %d KiB", grown>>10)
	if grown > bound {
		t.Errorf("%d unread answers to a keyed submission again: the heap grew %d MiB, want under %d MiB", n, grown>>20, bound>>20)
	}
}

// totalAlloc is the bytes the process has allocated so far.
func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// Every GET, events stream and DELETE of a run read its record whole
// first, its result copied out of the store (and scanned) before a
// byte was answered, even though the answer then streams the result
// from the store a chunk at a time: a peer asking on each of its
// connections at once made the daemon allocate the result once per
// request together, hundreds of megabytes each for a run at the
// default output ceiling. The lookup reads the record without its
// result: a request that is answered its first chunk and hangs up costs
// about that chunk.
func TestAsyncLookupDoesNotCopyTheResult(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	// About 9 MiB of result (6 MiB of "a, a quote two bytes escaped),
	// and as much of events.
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log('"a'.repeat(3 << 20))`, Limits: api.Limits{Output: 8 << 20}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ts.c.RunEvents(ctx, r.ID, nil); err != nil || res.Status != api.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	const n = 16
	const bound = 48 << 20 // n × 9 MiB copied before
	for _, req := range []string{"GET /v1/runs/" + r.ID, "GET /v1/runs/" + r.ID + "/events", "DELETE /v1/runs/" + r.ID} {
		before := totalAlloc()
		for range n {
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fmt.Fprintf(c, "%s HTTP/1.1\r\nHost: pmjail\r\n\r\n", req); err != nil {
				t.Fatal(err)
			}
			if resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %v %v", req, resp, err)
			}
			c.Close()
		}
		allocated := totalAlloc() - before
		t.Logf("%s: %d KiB allocated for %d requests", req, allocated>>10, n)
		if allocated > bound {
			t.Errorf("%s, %d times, each hung up after the answer's first bytes: %d MiB allocated, want under %d MiB", req, n, allocated>>20, bound>>20)
		}
	}
}

// An Idempotency-Key that is not printable ASCII (a header may carry
// bytes 0x80 to 0xFF; the HTTP server refuses control bytes) was taken, and stored in the run's record as JSON,
// which turns such bytes into U+FFFD: the prune that ended the run then
// deleted a key that never was, and the real one stayed in the store
// for ever, uncounted by runs.max_bytes, one per run a peer sent. Such a
// key is refused, naming the header.
func TestAsyncIdempotencyKeyPrintable(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	body := `{"runtime": "deno", "source": "1"}`
	for _, key := range []string{"k\xff\xfe", "\xc3\xa9t\xc3\xa9"} {
		status, eb := rawExchange(t, sock, fmt.Sprintf("POST /v1/runs HTTP/1.1\r\nHost: pmjail\r\nPrefer: respond-async\r\nIdempotency-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body))
		if status != http.StatusBadRequest || eb.Error.Field != api.IdempotencyKey {
			t.Errorf("Idempotency-Key %q: %d %+v, want 400 naming the header", key, status, eb)
		}
	}
	// A printable key, spaces and all, is taken.
	if _, err := ts.c.SubmitAsync(context.Background(), &api.Job{Runtime: "deno", Source: "1"}, `order 42 "x"`); err != nil {
		t.Errorf("a printable key: %v", err)
	}
}

// A reload applies new tenants and ceilings "to the runs that start
// afterwards". An async run admitted before a reload, still queued, was
// started after it under the ceiling and runner of the old config: a
// limit, an origin or a secret the operator took away (or the whole
// tenant) still applied to it, however long it had waited. It is
// checked again against the config in force when it gets its slot, and
// ended unrun, saying why, when it no longer fits.
func TestAsyncQueuedRunMeetsTheReloadedCeiling(t *testing.T) {
	sock, store := asyncDirs(t)
	cfgJSON := `{"version": 1, "max_concurrency": 1, "max_queue": 4, "others_max_queue": 4, "ceiling": {"limits": {"memory": %q}}, "runs": {"dir": %q}}`
	ts := startServerAt(t, fmt.Sprintf(cfgJSON, "512M", store), sock)
	ctx := context.Background()
	blocker := takeTheSlot(ctx, t, ts)
	m, err := api.ParseSize("384M")
	if err != nil {
		t.Fatal(err)
	}
	queued, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("ran")`, Limits: api.Limits{Memory: m}}, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(strings.NewReader(fmt.Sprintf(cfgJSON, "256M", store)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Socket.Path = sock
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.c.CancelRun(ctx, blocker.ID); err != nil {
		t.Fatal(err)
	}
	res, err := ts.c.RunEvents(ctx, queued.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != api.StatusCancelled || res.Error == nil || !strings.Contains(res.Error.Message, "limits.memory") || res.Stdout != "" {
		t.Errorf("a run queued before a reload that lowered the memory ceiling below its limit: %s %+v stdout %q, want cancelled unrun, naming limits.memory",
			res.Status, res.Error, res.Stdout)
	}

	// A reload that leaves the run's tenant out (here: others, refused
	// once a tenant is configured) ends it unrun too.
	blocker = takeTheSlot(ctx, t, ts)
	if queued, err = ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("ran")`}, ""); err != nil {
		t.Fatal(err)
	}
	cfg, err = ParseConfig(strings.NewReader(fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "runs": {"dir": %q}, "tenants": [{"name": "other", "match": {"uid": 4242}}]}`, store)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Socket.Path = sock
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.c.CancelRun(ctx, blocker.ID); err != nil {
		t.Fatal(err)
	}
	if res, err = ts.c.RunEvents(ctx, queued.ID, nil); err != nil {
		t.Fatal(err)
	}
	if res.Status != api.StatusCancelled || res.Error == nil || !strings.Contains(res.Error.Message, "tenant (others) away") || res.Stdout != "" {
		t.Errorf("a run queued before a reload that took its tenant away: %s %+v stdout %q, want cancelled unrun", res.Status, res.Error, res.Stdout)
	}
}

// The same keyed submission again, of a run that is running, answered
// "queued" (its stored state), where a GET of it says "running".
func TestAsyncKeyedAgainTellsRunning(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	job := &api.Job{Runtime: "deno", Source: `console.log("started"); for (;;) {}`}
	r, err := ts.c.SubmitAsync(ctx, job, "loop-1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-clienttest.Started(ctx, ts.c, r.ID):
	case <-time.After(60 * time.Second):
		t.Fatal("the run never started")
	}
	again, err := ts.c.SubmitAsync(ctx, job, "loop-1")
	if err != nil || again.ID != r.ID || again.Status != api.RunRunning {
		t.Errorf("the keyed submission again, of a running run: %+v %v, want it running", again, err)
	}
	if _, err := ts.c.CancelRun(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
}

// takeTheSlot submits an async run that spins until cancelled and waits
// until it has started: on a daemon of one slot, the runs submitted next
// wait queued.
func takeTheSlot(ctx context.Context, t *testing.T, ts *testServer) *api.Run {
	t.Helper()
	blocker, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("started"); for (;;) {}`}, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-clienttest.Started(ctx, ts.c, blocker.ID):
	case <-time.After(60 * time.Second):
		t.Fatal("the blocking run never started")
	}
	return blocker
}
