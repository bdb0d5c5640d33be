package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/runtimes"
)

func mustCaps(t *testing.T, s string) ipc.Capabilities {
	t.Helper()
	var c ipc.Capabilities
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// syncBuffer is a log sink the test reads while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testServer struct {
	*Server
	sock string
	logs *syncBuffer
	c    *client.Client
}

// startServer serves cfgJSON on a real socket in a temp dir, with real
// runtimes and cgroups.
func startServer(t *testing.T, cfgJSON string) *testServer {
	t.Helper()
	return startServerAt(t, cfgJSON, filepath.Join(t.TempDir(), "pmjail.sock"))
}

// startServerAt is startServer with the socket at path.
func startServerAt(t *testing.T, cfgJSON, path string) *testServer {
	t.Helper()
	testenv.RequireRoot(t)
	cfg, err := ParseConfig(strings.NewReader(cfgJSON))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Socket.Path = path
	logs := &syncBuffer{}
	opt := Options{Logger: NewLogger(logs, nil), Version: "test-version"}
	if opt.Install, err = runtimes.Locate(); err != nil {
		t.Fatal(err)
	}
	if opt.Cgroups, err = cgroup.NewManager(); err != nil {
		opt.CgroupReason = err.Error()
	}
	s, err := New(cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	ln, activated, err := Listen(cfg.Socket)
	if err != nil || activated {
		t.Fatalf("listen: %v (activated %v)", err, activated)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	ts := &testServer{Server: s, sock: cfg.Socket.Path, logs: logs, c: client.New(cfg.Socket.Path).WithTransport(
		func(rt http.RoundTripper) http.RoundTripper { return checkedTransport(t, rt) })}
	t.Cleanup(func() {
		ts.c.Close()
		if err := s.Shutdown(10 * time.Second); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(ts.sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left behind: %v", err)
		}
	})
	return ts
}

// post sends a raw body and returns the status and the error body.
func (ts *testServer) post(t *testing.T, body io.Reader) (int, api.ErrorBody, http.Header) {
	t.Helper()
	hc := &http.Client{Transport: checkedTransport(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ts.sock)
	}})}
	resp, err := hc.Post("http://pmjail/v1/runs", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &eb)
	return resp.StatusCode, eb, resp.Header
}

func TestServerRunsAndStreams(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	ctx := context.Background()
	res, err := ts.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log("hi " + 6*7)`})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jail.StatusOK || res.Stdout != "hi 42\n" {
		t.Fatalf("result %s %q %+v", res.Status, res.Stdout, res.Error)
	}
	if !strings.Contains(ts.logs.String(), `"job":"`+res.ID+`"`) {
		t.Errorf("the daemon log has no line with job=%s:\n%s", res.ID, ts.logs)
	}

	var evs []api.Event
	res, err = ts.c.Stream(ctx, &api.Job{
		Runtime:      "deno",
		Source:       `export default async (input, ctx) => { console.log("out"); console.error("err"); await ctx.host.log.info("note", {n: input.n}); return input.n + 1 }`,
		Input:        json.RawMessage(`{"n": 41}`),
		Capabilities: api.Capabilities{Log: true},
	}, func(ev api.Event) { evs = append(evs, ev) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jail.StatusOK || string(res.Value) != "42" {
		t.Fatalf("streamed result %s value %s %+v", res.Status, res.Value, res.Error)
	}
	seen := map[string]string{}
	for _, ev := range evs {
		seen[ev.Type] += ev.Data
		if ev.Type == api.EventLog {
			seen[ev.Type] += ev.Log.Message
		}
	}
	if seen["stdout"] != "out\n" || seen["stderr"] != "err\n" || seen["log"] != "note" {
		t.Errorf("events %+v", seen)
	}
	if last := evs[len(evs)-1]; last.Type != api.EventResult || len(evs) < 4 {
		t.Errorf("%d events, last %q: want output and log events, then the result", len(evs), last.Type)
	}

	h, err := ts.c.Health(ctx)
	if err != nil || h.Status != "ok" || h.MaxConcurrency < 1 {
		t.Errorf("health %+v %v", h, err)
	}
	p, err := ts.c.Posture(ctx)
	if err != nil || p.Decision != "run" || len(p.Layers) == 0 || p.Cgroup == nil {
		t.Errorf("posture %+v %v", p, err)
	}
	m, err := ts.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`pmjail_runs_total{runtime="deno",status="ok",tenant="others"} 2`, "pmjail_run_duration_seconds_bucket", "pmjail_runs_in_flight 0", "pmjail_runs_queued 0", "pmjail_requests_rejected_total"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestServerRefusals(t *testing.T) {
	ts := startServer(t, `{"version": 1, "ceiling": {"limits": {"memory": "128M"}, "runtimes": ["deno"]}}`)
	for _, tc := range []struct {
		body   string
		status int
		field  string
	}{
		{`{"runtime": "deno", "source": "1", "limits": {"memory": "256M"}}`, 400, "limits.memory"},
		{`{"runtime": "python", "source": "1", "limits": {"memory": "64M"}}`, 400, "runtime"},
		{`{"runtime": "deno", "source": "1", "evil": true}`, 400, "evil"},
		{`{"runtime": "deno", "source": "1", "profile": "/etc/x.json"}`, 400, "profile"},
		{`{"runtime": "deno", "source": "1", "capabilities": {"request": {"urls": ["https://a.example"]}}, "limits": {"memory": "64M"}}`, 400, "capabilities.request"},
		{`{"runtime": "deno", "source": `, 400, "source"}, // malformed where source's value was due
		{`{"runtime": "deno", "source": "` + strings.Repeat("x", job.MaxRequestBytes) + `"}`, 413, ""},
	} {
		status, eb, _ := ts.post(t, strings.NewReader(tc.body))
		if status != tc.status || eb.Error.Field != tc.field {
			short := tc.body
			if len(short) > 80 {
				short = short[:80]
			}
			t.Errorf("%s: %d %+v, want %d naming %q", short, status, eb.Error, tc.status, tc.field)
		}
	}
	// A body without a length (chunked) is capped as it is read.
	status, eb, _ := ts.post(t, io.MultiReader(strings.NewReader(`{"source":"`), strings.NewReader(strings.Repeat("y", job.MaxRequestBytes+10))))
	if status != 413 || eb.Error.Code != "too_large" {
		t.Errorf("chunked oversize body: %d %+v", status, eb)
	}
	// The refusal names the caps a client can act on, not only the body's.
	if want := fmt.Sprintf("job is larger than %d bytes (at most 1048576 bytes of source or files, 1048576 of input and 1048576 of stdin, with room for the rest)", job.MaxRequestBytes); eb.Error.Message != want {
		t.Errorf("oversize message %q, want %q", eb.Error.Message, want)
	}
}

func TestServerQueueFullAndDisconnect(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "max_queue": -1}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	streamDone := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := ts.c.Stream(ctx, &api.Job{Runtime: "deno", Source: `console.log("up"); await new Promise(r => setTimeout(r, 60000))`},
			func(ev api.Event) { once.Do(func() { close(started) }) })
		streamDone <- err
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the slow run never started")
	}
	_, err := ts.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `1`})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.RetryAfter <= 0 {
		t.Fatalf("run beyond the bounds: %v, want 429 with Retry-After", err)
	}
	// The client goes away: its run must end now, not after 60 s.
	t0 := time.Now()
	cancel()
	<-streamDone
	waitFor(t, func() bool { r, _, _, _ := ts.lim.stats(); return r == 0 })
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("the run outlived its client by %v", d)
	}
	waitFor(t, func() bool { return strings.Contains(ts.logs.String(), `"client_gone":true`) })
	// Its run is cancelled, not pmjail's fault: an alert on
	// internal_error must not fire for a client that hung up.
	if !strings.Contains(ts.logs.String(), `"status":"cancelled"`) {
		t.Errorf("the run of a client gone is not logged as cancelled:\n%s", ts.logs)
	}
	if got := countedStatus(t, ts.Server, jail.StatusCancelled); got != 1 {
		t.Errorf("pmjail_runs_total{status=cancelled} = %v, want 1", got)
	}
	if got := countedStatus(t, ts.Server, jail.StatusInternalError); got != 0 {
		t.Errorf("pmjail_runs_total{status=internal_error} = %v, want 0", got)
	}
}

func TestServerShutdownCancelsAfterGrace(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	got := make(chan *jail.Result, 1)
	go func() {
		res, err := ts.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `await new Promise(r => setTimeout(r, 60000))`})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	// Once the limiter counts it the run is in flight: shutdown must let
	// it go on for the whole grace period, then cancel it.
	waitFor(t, func() bool { r, _, _, _ := ts.lim.stats(); return r == 1 })
	const grace = time.Second
	t0 := time.Now()
	if err := ts.Shutdown(grace); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	res := <-got
	if res == nil || res.Status != jail.StatusCancelled || res.ExitCode != 125 || res.Error == nil ||
		res.Error.Code != "cancelled" || !strings.Contains(res.Error.Message, "shut down") {
		t.Fatalf("a run cancelled at the end of the grace period: %+v, want status cancelled, exit code 125, the shutdown named", res)
	}
	if got := countedStatus(t, ts.Server, jail.StatusCancelled); got != 1 {
		t.Errorf("pmjail_runs_total{status=cancelled} = %v, want 1", got)
	}
	if took < grace {
		t.Errorf("shutdown returned after %v: the %v grace was not honoured", took, grace)
	}
	if took > grace+drainCancelWait {
		t.Errorf("shutdown took %v with a %v grace and %v to cancel", took, grace, drainCancelWait)
	}
	if _, err := ts.c.Health(context.Background()); err == nil {
		t.Error("health answered after shutdown")
	}
	// Its client stayed and got the result: the log must not say it went
	// away (an operator counts client_gone as clients hanging up).
	for _, line := range strings.Split(ts.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"run answered"`) && !strings.Contains(line, `"client_gone":false`) {
			t.Errorf("the answered run of a client that stayed: %s, want client_gone false", line)
		}
	}
}

func TestServerReload(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	req := func() *api.Job {
		return &api.Job{Runtime: "deno", Source: `console.log(1)`, Capabilities: api.Capabilities{Log: true}}
	}
	if _, err := ts.c.Run(context.Background(), req()); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(strings.NewReader(`{"version": 1, "max_concurrency": 3, "ceiling": {"capabilities": {"log": false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	_, err = ts.c.Run(context.Background(), req())
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Field != "capabilities.log" {
		t.Errorf("after reload: %v, want 400 naming capabilities.log", err)
	}
	if h, _ := ts.c.Health(context.Background()); h == nil || h.MaxConcurrency != 3 {
		t.Errorf("health after reload: %+v", h)
	}
}

func TestPeerCredentials(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	p := readPeer(sc)
	if p.Err != nil || int(p.PID) != os.Getpid() || int(p.UID) != os.Getuid() || int(p.GID) != os.Getgid() {
		t.Errorf("peer %+v, want this process (pid %d uid %d gid %d)", p, os.Getpid(), os.Getuid(), os.Getgid())
	}
	if p := readPeer(&net.TCPConn{}); p.Err == nil {
		t.Error("a TCP connection got peer credentials")
	}
}
