package queue

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

func TestConfigCheckNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "queue.nats.urls: required"},
		{Config{URLs: []string{"http://x:1"}}, "queue.nats.urls[0]"},
		{Config{URLs: []string{"nats://u:p@x:1"}}, "queue.nats.urls[0]"},
		{Config{URLs: []string{"nats://x:1"}, User: "u"}, "queue.nats.password"},
		{Config{URLs: []string{"nats://x:1"}, Password: "p"}, "queue.nats.user"},
		{Config{URLs: []string{"nats://x:1"}, Credentials: "/nonexistent.creds"}, "queue.nats.credentials"},
		{Config{URLs: []string{"nats://x:1"}, Credentials: "/etc/hostname", User: "u", Password: "p"}, "set at most one"},
		{Config{URLs: []string{"nats://x:1"}, Stream: "a.b"}, "queue.nats.stream"},
		{Config{URLs: []string{"nats://x:1"}, Bucket: "a b"}, "queue.nats.bucket"},
		{Config{URLs: []string{"nats://x:1"}, Subject: "jobs.>"}, "queue.nats.subject"},
		{Config{URLs: []string{"nats://x:1"}, ResultSubject: "r.*"}, "queue.nats.result_subject"},
		{Config{URLs: []string{"nats://x:1"}, AckWait: api.Duration(time.Millisecond)}, "queue.nats.ack_wait"},
		{Config{URLs: []string{"nats://x:1"}, MaxAckPending: -1}, "queue.nats.max_ack_pending"},
		{Config{URLs: []string{"nats://x:1"}, MaxDeliver: -2}, "queue.nats.max_deliver"},
		{Config{URLs: []string{"nats://x:1"}, Concurrency: 5}, "queue.nats.concurrency"},
		{Config{URLs: []string{"nats://x:1"}, Concurrency: 3, MaxAckPending: 2}, "queue.nats.concurrency"},
	} {
		err := tc.cfg.Check(4)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	c := Config{URLs: []string{"nats://127.0.0.1:4222"}}
	if err := c.Check(4); err != nil {
		t.Fatal(err)
	}
	if c.Stream != DefaultStream || c.Concurrency != 4 || time.Duration(c.AckWait) != DefaultAckWait {
		t.Errorf("defaults not filled in: %+v", c)
	}
}

// startNATS starts a one-node JetStream server in this process.
func startNATS(t *testing.T) string {
	t.Helper()
	return serveNATS(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
}

// serveNATS starts a NATS server of opts in this process, stopped at the
// test's end, and returns its client URL.
func serveNATS(t *testing.T, opts *server.Options) string {
	t.Helper()
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// echo is an Executor standing for the daemon: the worker's protocol is
// under test, not the jail. Its result's stdout is the job's source.
type echo struct {
	calls atomic.Int32
	hold  time.Duration
}

func (e *echo) Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error) {
	e.calls.Add(1)
	var j api.Job
	if err := json.Unmarshal(body, &j); err != nil || j.Source == "" {
		return nil, &Refusal{Code: api.CodeInvalidJob, Message: "malformed job JSON", Field: "source"}
	}
	select {
	case <-time.After(e.hold):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &api.Result{Status: api.StatusOK, Stdout: j.Source, Logs: []api.LogEntry{}}, nil
}

func setup(t *testing.T, ackWait time.Duration) (Config, *Client) {
	url := startNATS(t)
	cfg := Config{URLs: []string{url}, AckWait: api.Duration(ackWait), Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100, History: 5}); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return cfg, c
}

// runner is what the tests' executors are: a job's run, with no bound of
// its tenant's.
type runner interface {
	Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error)
}

// admitAll is the Executor of a runner: every job is admitted at once.
type admitAll struct{ r runner }

func (a admitAll) Admit(tenant string) (Admission, time.Duration) {
	return admitted{a.r, tenant}, 0
}

func (admitAll) Has(string) bool { return true }

func (admitAll) Freed() <-chan struct{} { return nil }

type admitted struct {
	r      runner
	tenant string
}

func (a admitted) Execute(ctx context.Context, body []byte) (*api.Result, error) {
	return a.r.Execute(ctx, a.tenant, body)
}

func (admitted) Release() {}

func startWorker(t *testing.T, cfg Config, e runner) *Worker {
	w, err := NewWorker(context.Background(), &cfg, admitAll{e}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	t.Cleanup(func() { w.Stop(time.Second) })
	return w
}

// A job runs once: its result is stored once and acked; the same id
// sent again (past the stream's duplicate check) is acked unrun.
func TestWorkerRunsAJobOnce(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	e := &echo{}
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "one"})
	if err != nil || res.Stdout != "one" || res.Status != api.StatusOK {
		t.Fatalf("run: %+v %v", res, err)
	}
	// Sent again under the same id without the duplicate header, as a
	// redelivery would come.
	id := res.ID
	msg := &nats.Msg{Subject: cfg.Subject + ".alice", Header: nats.Header{HeaderID: []string{id}}, Data: []byte(`{"runtime":"deno","source":"two"}`)}
	if _, err := c.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, c, cfg)
	if n := e.calls.Load(); n != 1 {
		t.Errorf("executor ran %d times, want 1", n)
	}
	got, err := c.Get(ctx, "alice", id)
	if err != nil || got.Stdout != "one" {
		t.Errorf("stored result %+v %v, want the first run's", got, err)
	}
	h, err := resultsKV(t, c).History(ctx, Key("alice", id))
	if err != nil || len(h) != 1 {
		t.Errorf("history of the key: %d entries (%v), want 1", len(h), err)
	}
	if _, err := c.Get(ctx, "bob", id); !errors.Is(err, ErrNoResult) {
		t.Errorf("another tenant's key: %v, want ErrNoResult", err)
	}
}

// A bad message is terminated with a refusal stored, and the worker goes
// on.
func TestWorkerTerminatesBadMessages(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	e := &echo{}
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// No id: keyed by its stream sequence.
	ack, err := c.js.Publish(ctx, cfg.Subject+".alice", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	seqKey := "seq=" + itoa(ack.Sequence)
	res, err := c.Wait(ctx, "alice", seqKey)
	if err != nil || res.Status != api.StatusRefused || res.Error == nil || res.Error.Code != api.CodeInvalidJob || !strings.Contains(res.Error.Message, HeaderID) {
		t.Fatalf("no-id message: %+v %v", res, err)
	}
	// Not a job: the executor's refusal is its result.
	if err := c.Submit(ctx, "alice", "garbage", &api.Job{}); err != nil {
		t.Fatal(err)
	}
	res, err = c.Wait(ctx, "alice", "garbage")
	if err != nil || res.Status != api.StatusRefused || res.Error.Code != api.CodeInvalidJob {
		t.Fatalf("bad job: %+v %v", res, err)
	}
	res, err = c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "after"})
	if err != nil || res.Stdout != "after" {
		t.Fatalf("run after bad messages: %+v %v", res, err)
	}
	waitEmpty(t, c, cfg)
	if n := e.calls.Load(); n != 2 {
		t.Errorf("executor ran %d times, want 2 (the no-id message never reaches it)", n)
	}
}

// A run longer than the ack wait stays with its live worker: its beats
// keep the job from going to the second worker.
func TestWorkerKeepsALongJob(t *testing.T) {
	cfg, c := setup(t, time.Second)
	e := &echo{hold: 3500 * time.Millisecond}
	startWorker(t, cfg, e)
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "long"})
	if err != nil || res.Stdout != "long" {
		t.Fatalf("run: %+v %v", res, err)
	}
	waitEmpty(t, c, cfg)
	if n := e.calls.Load(); n != 1 {
		t.Errorf("the job ran %d times over 3.5 ack waits, want 1", n)
	}
}

// waitEmpty waits until every job of the stream is acked.
func waitEmpty(t *testing.T, c *Client, cfg Config) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := c.js.Stream(context.Background(), cfg.Stream)
		if err == nil {
			info, err := s.Info(context.Background())
			if err == nil && info.State.Msgs == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream not empty after 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// started is an echo that says when a run starts.
type started struct {
	echo
	began chan struct{}
}

func (e *started) Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error) {
	e.began <- struct{}{}
	return e.echo.Execute(ctx, tenant, body)
}

// A stopping worker lets its run go on for the grace period, then cancels
// it and sends the job back, where another worker takes it.
func TestWorkerStopSendsTheJobBack(t *testing.T) {
	cfg, c := setup(t, 30*time.Second)
	slow := &started{echo: echo{hold: time.Minute}, began: make(chan struct{}, 1)}
	w, err := NewWorker(context.Background(), &cfg, admitAll{slow}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Submit(ctx, "alice", "handed-back", &api.Job{Runtime: "deno", Source: "back"}); err != nil {
		t.Fatal(err)
	}
	<-slow.began
	t0 := time.Now()
	w.Stop(500 * time.Millisecond)
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Stop took %v with a grace of 500ms", d)
	}
	// Well within the ack wait of 30s: the job came back by a nak.
	fast := &echo{}
	startWorker(t, cfg, fast)
	res, err := c.Wait(ctx, "alice", "handed-back")
	if err != nil || res.Stdout != "back" {
		t.Fatalf("the job after its worker stopped: %+v %v", res, err)
	}
	if fast.calls.Load() != 1 {
		t.Errorf("the second worker ran it %d times", fast.calls.Load())
	}
}

// resultsKV is the results bucket of c's config, read as the workers
// read it (a client reads its own keys only, by direct gets).
func resultsKV(t *testing.T, c *Client) jetstream.KeyValue {
	t.Helper()
	kv, err := c.js.KeyValue(context.Background(), c.cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
