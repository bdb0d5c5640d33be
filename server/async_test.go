package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/internal/clienttest"
)

// asyncDirs makes a world-traversable directory for the socket (another
// uid's peer must reach it) and the store's directory inside it.
func asyncDirs(t *testing.T) (sock, store string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "async-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "pmjail.sock"), filepath.Join(dir, "state")
}

// rawAsync posts body with Prefer: respond-async and key, and returns the
// status, the Location and the body.
func rawAsync(t *testing.T, sock, path, body, key string) (int, string, string) {
	t.Helper()
	hc := &http.Client{Transport: checkedTransport(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}})}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, "http://pmjail"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", api.PreferAsync)
	if key != "" {
		req.Header.Set(api.IdempotencyKey, key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), b.String()
}

// curlAs sends method path over sock as uid, through curl in a process
// of that uid, and returns the HTTP status.
func curlAs(t *testing.T, uid uint32, sock, method, path string) string {
	t.Helper()
	return curlAsArgs(t, uid, "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "--unix-socket", sock, "http://pmjail"+path)
}

// curlAsArgs runs curl with args as uid and returns its output.
func curlAsArgs(t *testing.T, uid uint32, args ...string) string {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl to connect as another uid")
	}
	cmd := exec.Command(curl, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl as uid %d: %v %s", uid, err, out)
	}
	return string(out)
}

// Submit, poll, stream and cancel over the socket; another peer's GET,
// events and DELETE of the id are 404, and a batch makes a run per job.
func TestAsyncRuns(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 2, "socket": {"mode": "0666"}, "allow": {"uids": [4243]},
		"runs": {"dir": %q, "max_batch": 3}}`, store), sock)
	ctx := context.Background()

	status, loc, body := rawAsync(t, sock, "/v1/runs", `{"runtime": "deno", "source": "console.log('hi'); console.error('e')"}`, "")
	if status != http.StatusAccepted || !strings.HasPrefix(loc, "/v1/runs/") || !strings.Contains(body, `"status":"queued"`) {
		t.Fatalf("async POST: %d %q %s", status, loc, body)
	}
	id := strings.TrimPrefix(loc, "/v1/runs/")
	var evs []api.Event
	res, err := ts.c.RunEvents(ctx, id, func(ev api.Event) { evs = append(evs, ev) })
	if err != nil || res.Status != api.StatusOK || res.ID != id || res.Stdout != "hi\n" {
		t.Fatalf("events: %+v %v", res, err)
	}
	if len(evs) < 3 || evs[0].Type != api.EventStdout && evs[0].Type != api.EventStderr {
		t.Errorf("events %+v, want output, then the result", evs)
	}
	run, err := ts.c.GetRun(ctx, id)
	if err != nil || run.Status != api.RunDone || run.Result == nil || run.Result.Stdout != "hi\n" {
		t.Fatalf("GET: %+v %v", run, err)
	}
	// From the start again, after the end: the same events.
	var again []api.Event
	if _, err := ts.c.RunEvents(ctx, id, func(ev api.Event) { again = append(again, ev) }); err != nil || len(again) != len(evs) {
		t.Errorf("events after the end: %d, %v; want %d", len(again), err, len(evs))
	}

	// Another peer: 404 for GET, events and DELETE, not 403.
	for _, m := range []struct{ method, path string }{{"GET", "/v1/runs/" + id}, {"GET", "/v1/runs/" + id + "/events"}, {"DELETE", "/v1/runs/" + id}} {
		if got := curlAs(t, 4243, sock, m.method, m.path); got != "404" {
			t.Errorf("uid 4243 %s %s: %s, want 404", m.method, m.path, got)
		}
	}
	if got := curlAs(t, 4243, sock, "GET", "/v1/runs/0000000000000000"); got != "404" {
		t.Errorf("an unknown id: %s", got)
	}
	// An Idempotency-Key is its owner's: another peer giving the same key
	// and job gets a run of its own, not a way to the first one's.
	const keyed = `{"runtime": "deno", "source": "console.log('mine')"}`
	if status, loc, body := rawAsync(t, sock, "/v1/runs", keyed, "shared-key"); status != http.StatusAccepted {
		t.Fatalf("keyed submit: %d %s", status, body)
	} else {
		theirs := curlAsArgs(t, 4243, "-s", "-H", "Prefer: respond-async", "-H", "Idempotency-Key: shared-key", "-H", "Content-Type: application/json",
			"-d", keyed, "--unix-socket", sock, "http://pmjail/v1/runs")
		var run api.Run
		if err := json.Unmarshal([]byte(theirs), &run); err != nil || run.Status != api.RunQueued || run.ID == "" || strings.HasSuffix(loc, run.ID) {
			t.Fatalf("another peer's submission under the same key: %s, want a queued run of its own (not %s)", theirs, loc)
		}
		// Its owner follows it to its end.
		if events := curlAsArgs(t, 4243, "-s", "--unix-socket", sock, "http://pmjail/v1/runs/"+run.ID+"/events"); !strings.Contains(events, `"data":"mine\n"`) ||
			!strings.Contains(events, `"type":"result"`) {
			t.Errorf("the owner's events: %s", events)
		}
		if _, err := ts.c.RunEvents(ctx, strings.TrimPrefix(loc, "/v1/runs/"), nil); err != nil {
			t.Fatal(err)
		}
	}

	// Cancel a run that is running: DELETE answers with its end.
	long, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("started"); while (true) {}`}, "")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	followed := make(chan *api.Result, 1)
	go func() {
		var once bool
		r, err := ts.c.RunEvents(ctx, long.ID, func(ev api.Event) {
			if ev.Type == api.EventStdout && !once {
				once = true
				close(started)
			}
		})
		if err != nil {
			t.Error(err)
		}
		followed <- r
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the long run never started")
	}
	if run, err := ts.c.GetRun(ctx, long.ID); err != nil || run.Status != api.RunRunning {
		t.Errorf("GET while running: %+v %v", run, err)
	}
	run, err = ts.c.CancelRun(ctx, long.ID)
	if err != nil || run.Status != api.RunCancelled || run.Result == nil || run.Result.Status != api.StatusCancelled ||
		run.Result.Error == nil || !strings.Contains(run.Result.Error.Message, "DELETE") {
		t.Fatalf("DELETE: %+v %v", run, err)
	}
	if r := <-followed; r == nil || r.Status != api.StatusCancelled {
		t.Errorf("the follower's result: %+v", r)
	}

	// A batch: a run per job; over the cap, a 400 naming jobs.
	b, err := ts.c.SubmitBatch(ctx, []api.Job{{Runtime: "deno", Source: "console.log(1)"}, {Runtime: "deno", Source: "console.log(2)"}})
	if err != nil || len(b.Runs) != 2 || b.Runs[0].ID == b.Runs[1].ID {
		t.Fatalf("batch: %+v %v", b, err)
	}
	for i, r := range b.Runs {
		res, err := ts.c.RunEvents(ctx, r.ID, nil)
		if err != nil || res.Status != api.StatusOK || res.Stdout != fmt.Sprintf("%d\n", i+1) {
			t.Errorf("batch run %d: %+v %v", i, res, err)
		}
	}
	four := make([]api.Job, 4)
	for i := range four {
		four[i] = api.Job{Runtime: "deno", Source: "1"}
	}
	var apiErr *client.Error
	if _, err := ts.c.SubmitBatch(ctx, four); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Field != "jobs" {
		t.Errorf("a batch over the cap: %v, want 400 naming jobs", err)
	}
	if _, err := ts.c.SubmitBatch(ctx, []api.Job{{Runtime: "deno", Source: "1"}, {Runtime: "cobol", Source: "1"}}); !errors.As(err, &apiErr) ||
		apiErr.StatusCode != 400 || apiErr.Field != "jobs[1].runtime" || !strings.HasPrefix(apiErr.Message, "jobs[1].runtime: unknown runtime") {
		t.Errorf("a batch with a bad job: %v, want 400 naming jobs[1].runtime", err)
	}

	m, err := ts.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`pmjail_async_runs_total{event="submitted"} 6`, `pmjail_async_runs_total{event="cancelled"} 1`, `pmjail_async_runs_total{event="done"} 5`, "pmjail_async_runs_stored 6"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// An Idempotency-Key: the same job again is the same run, another job
// under it a 422 naming the header; another peer's key is its own.
func TestAsyncIdempotency(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	job := &api.Job{Runtime: "deno", Source: `console.log("once")`}
	first, err := ts.c.SubmitAsync(ctx, job, "k-1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := ts.c.SubmitAsync(ctx, job, "k-1")
	if err != nil || second.ID != first.ID {
		t.Fatalf("the same key and job: %+v %v, want run %s", second, err, first.ID)
	}
	if _, err := ts.c.RunEvents(ctx, first.ID, nil); err != nil {
		t.Fatal(err)
	}
	third, err := ts.c.SubmitAsync(ctx, job, "k-1")
	if err != nil || third.ID != first.ID || third.Status != api.RunDone {
		t.Errorf("the same key after the end: %+v %v", third, err)
	}
	var apiErr *client.Error
	if _, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("other")`}, "k-1"); !errors.As(err, &apiErr) ||
		apiErr.StatusCode != http.StatusUnprocessableEntity || apiErr.Code != api.CodeIdempotencyConflict || apiErr.Field != api.IdempotencyKey {
		t.Errorf("another job under the key: %v, want 422 %s", err, api.CodeIdempotencyConflict)
	}
	if other, err := ts.c.SubmitAsync(ctx, job, "k-2"); err != nil || other.ID == first.ID {
		t.Errorf("another key: %+v %v", other, err)
	}
}

// Retention and the size cap end finished runs, oldest first; an ended
// run's GET is then 404.
func TestAsyncRetentionAndSizeCap(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "ceiling": {"limits": {"output": "60K"}}, "runs": {"dir": %q, "retention": "1h", "max_bytes": "120K"}}`, store), sock)
	ctx := context.Background()
	big := &api.Job{Runtime: "deno", Source: `console.log("x".repeat(40000))`}
	var ids []string
	for range 3 {
		r, err := ts.c.SubmitAsync(ctx, big, "")
		if err != nil {
			t.Fatal(err)
		}
		if res, err := ts.c.RunEvents(ctx, r.ID, nil); err != nil || res.Status != api.StatusOK {
			t.Fatalf("%+v %v", res, err)
		}
		ids = append(ids, r.ID)
	}
	// Each run keeps its output twice (in its result and its events):
	// over 80K, so the cap holds one, the newest.
	var apiErr *client.Error
	for _, id := range ids[:2] {
		if _, err := ts.c.GetRun(ctx, id); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Errorf("run %s over the cap: %v, want 404", id, err)
		}
	}
	if r, err := ts.c.GetRun(ctx, ids[2]); err != nil || r.Status != api.RunDone {
		t.Fatalf("the newest run: %+v %v", r, err)
	}
	if n, b := ts.async.store.Stats(); n != 1 || b > 120<<10 {
		t.Errorf("store: %d runs, %d bytes; want 1 within the cap", n, b)
	}
	// Retention: at an hour on, the prune the daemon makes each minute
	// ends the last one.
	ts.async.prune(time.Now().Add(time.Hour))
	if _, err := ts.c.GetRun(ctx, ids[2]); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Errorf("run past its retention: %v, want 404", err)
	}
}

// Without a store, an async submission is a 503 that says why; a sync
// run is as it was.
func TestAsyncUnavailable(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	status, _, body := rawAsync(t, ts.sock, "/v1/runs", `{"runtime": "deno", "source": "1"}`, "")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, api.CodeAsyncUnavailable) || !strings.Contains(body, "runs.dir") {
		t.Errorf("async without a store: %d %s", status, body)
	}
}

func TestRunsConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		cfg  string
		want error
	}{
		{`{"version": 1, "runs": {"dir": "rel/dir"}}`, ErrRunsDir},
		{`{"version": 1, "runs": {"max_batch": 100000}}`, ErrRunsMaxBatch},
		{`{"version": 1, "runs": {"max_batch": -1}}`, ErrRunsMaxBatch},
	} {
		_, err := ParseConfig(strings.NewReader(tc.cfg))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.cfg, err, tc.want)
		}
	}
	// Negative durations and sizes the JSON refuses already; a config
	// built in code meets the check.
	if err := (&Config{Version: 1, Runs: RunsConfig{Retention: -1}}).check(); !errors.Is(err, ErrRunsRetention) {
		t.Errorf("negative retention: %v", err)
	}
	if err := (&Config{Version: 1, Runs: RunsConfig{MaxBytes: -1}}).check(); !errors.Is(err, ErrRunsMaxBytes) {
		t.Errorf("negative size cap: %v", err)
	}
	c, err := ParseConfig(strings.NewReader(`{"version": 1}`))
	if err != nil || c.Runs.MaxBatch != DefaultMaxBatch || c.Runs.MaxBytes != DefaultRunsMaxBytes {
		t.Errorf("defaults: %+v %v", c.Runs, err)
	}
}

// Async runs are admitted as sync ones are, by the tenant's share and
// rate, but wait queued without a connection: a full queue is a 429 at
// submission, a queued run shows queued and a DELETE ends it unrun.
func TestAsyncAdmission(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 2, "max_queue": 4, "runs": {"dir": %q},
		"tenants": [{"name": "root", "match": {"uid": 0}, "max_concurrency": 1, "max_queue": 1, "rate": "3/h"}]}`, store), sock)
	ctx := context.Background()
	loop := &api.Job{Runtime: "deno", Source: `console.log("started"); for (;;) {}`}
	running, err := ts.c.SubmitAsync(ctx, loop, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-clienttest.Started(ctx, ts.c, running.ID):
	case <-time.After(60 * time.Second):
		t.Fatal("the first run never started")
	}
	queued, err := ts.c.SubmitAsync(ctx, loop, "")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ts.c.GetRun(ctx, queued.ID); err != nil || r.Status != api.RunQueued {
		t.Errorf("the second run: %+v %v, want queued behind the tenant's one slot", r, err)
	}
	var apiErr *client.Error
	if _, err := ts.c.SubmitAsync(ctx, loop, ""); !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != api.CodeQueueFull {
		t.Errorf("a third run with the tenant's queue full: %v, want 429 %s", err, api.CodeQueueFull)
	}
	// A batch the tenant's share could hold, but not now: refused whole,
	// for now (429).
	two := []api.Job{{Runtime: "deno", Source: "1"}, {Runtime: "deno", Source: "2"}}
	if _, err := ts.c.SubmitBatch(ctx, two); !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || !strings.Contains(apiErr.Message, "whole or not at all") {
		t.Errorf("a batch beyond the tenant's free places: %v, want 429", err)
	}
	r, err := ts.c.CancelRun(ctx, queued.ID)
	if err != nil || r.Status != api.RunCancelled || r.Result == nil || r.Result.Usage.WallMS != 0 || !strings.Contains(r.Result.Error.Message, "DELETE") {
		t.Errorf("DELETE of the queued run: %+v %v", r, err)
	}
	if _, err := ts.c.CancelRun(ctx, running.ID); err != nil {
		t.Fatal(err)
	}
	// A batch more than the tenant's slot and queue place can ever hold
	// is refused at once, naming jobs, not 429 with a Retry-After that no
	// retry could meet (TestAsyncBatchOverRate: nor one over its rate).
	storedBefore, _ := ts.async.store.Stats()
	three := []api.Job{{Runtime: "deno", Source: "1"}, {Runtime: "deno", Source: "2"}, {Runtime: "deno", Source: "3"}}
	if _, err := ts.c.SubmitBatch(ctx, three); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Field != "jobs" {
		t.Errorf("a batch the tenant's share can never hold: %v, want 400 naming jobs", err)
	}
	ts.async.mu.Lock()
	live := len(ts.async.live)
	ts.async.mu.Unlock()
	if n, _ := ts.async.store.Stats(); n != storedBefore || live != 0 {
		t.Errorf("a refused batch left %d finished runs (want %d) and %d live ones", n, storedBefore, live)
	}
	if _, q := ts.load(); q != 0 {
		t.Errorf("a refused batch left %d queue places taken", q)
	}
	// The rate, three runs an hour: the first run spent one, and so did
	// the one its owner cancelled unrun (TestRateSpentByRunsTheirClientEnds);
	// the refused runs were refunded, as a sync run's refusal is.
	if _, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: "0"}, ""); err != nil {
		t.Errorf("the last run within the rate: %v", err)
	}
	if _, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: "3"}, ""); !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != api.CodeRateLimited {
		t.Errorf("a run over the rate: %v, want 429 %s", err, api.CodeRateLimited)
	}
}

// A shutdown lets a running async run end within the grace period and
// cancels the queued ones; the next daemon on the store finds both.
func TestAsyncShutdown(t *testing.T) {
	sock, store := asyncDirs(t)
	cfg := fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "runs": {"dir": %q}}`, store)
	ts := startServerAt(t, cfg, sock)
	ctx := context.Background()
	// Ends at its own 2s limit, inside the grace period.
	running, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("started"); for (;;) {}`, Limits: api.Limits{Timeout: api.Duration(2 * time.Second)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-clienttest.Started(ctx, ts.c, running.ID):
	case <-time.After(60 * time.Second):
		t.Fatal("the run never started")
	}
	queued, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: "1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Shutdown(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	next := startServerAt(t, cfg, filepath.Join(filepath.Dir(sock), "next.sock"))
	if r, err := next.c.GetRun(ctx, running.ID); err != nil || r.Status != api.RunDone || r.Result.Status != api.StatusTimeout {
		t.Errorf("the running run after a shutdown: %+v %v, want done at its time limit", r, err)
	}
	r, err := next.c.GetRun(ctx, queued.ID)
	if err != nil || r.Status != api.RunCancelled || !strings.Contains(r.Result.Error.Message, "before the run had a slot") {
		t.Errorf("the queued run after a shutdown: %+v %v", r, err)
	}
}

// A shutdown whose grace period ends with an async run still running
// cancels it; a client following its events, as
// `pmjail runs events` does, still gets the stream's last line, the
// cancelled result, rather than a stream cut before it: the follower
// was cut by the same cancellation as the run, before the run's end was
// written.
func TestAsyncShutdownFollowerGetsResult(t *testing.T) {
	sock, store := asyncDirs(t)
	cfg := fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "runs": {"dir": %q}}`, store)
	ts := startServerAt(t, cfg, sock)
	ctx := context.Background()
	running, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("started"); for (;;) {}`, Limits: api.Limits{Timeout: api.Duration(time.Minute)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	type followed struct {
		res *api.Result
		err error
	}
	ended := make(chan followed, 1)
	go func() {
		var once bool
		res, err := ts.c.RunEvents(ctx, running.ID, func(ev api.Event) {
			if ev.Type == api.EventStdout && !once {
				once = true
				close(started)
			}
		})
		ended <- followed{res, err}
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the run never started")
	}
	if err := ts.Shutdown(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-ended:
		if f.err != nil || f.res == nil || f.res.Status != api.StatusCancelled {
			t.Errorf("the follower of a run the shutdown cancelled: %+v %v, want its cancelled result", f.res, f.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follower's stream outlived the shutdown by 30s")
	}
}

// A batch larger than its tenant's rate lets start at once can never be
// admitted (it is admitted whole): refused at once, naming jobs.
func TestAsyncBatchOverRate(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 2, "max_queue": 4, "warm": {"deno": 0}, "prestart": -1, "runs": {"dir": %q},
		"tenants": [{"name": "root", "match": {"uid": 0}, "max_concurrency": 1, "max_queue": 4, "rate": "2/h"}]}`, store), sock)
	three := []api.Job{{Runtime: "deno", Source: "1"}, {Runtime: "deno", Source: "2"}, {Runtime: "deno", Source: "3"}}
	var apiErr *client.Error
	if _, err := ts.c.SubmitBatch(context.Background(), three); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Field != "jobs" ||
		!strings.Contains(apiErr.Message, "rate") {
		t.Errorf("a batch over the tenant's rate count: %v, want 400 naming jobs and the rate", err)
	}
}
