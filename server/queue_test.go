package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/queue"
)

// TestQueueConfigExampleParses: deploy/queue's worker config stays valid
// (its password file a test file), and its queue section is checked with
// the daemon's.
func TestQueueConfigExampleParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "queue", "worker.config.json"))
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer("/etc/pmjail/nats-worker.password", pw, `"pmjail"`, `"root"`).Replace(string(data))
	c, err := ParseConfig(strings.NewReader(cfg))
	if err != nil {
		t.Fatalf("deploy/queue/worker.config.json: %v", err)
	}
	if q := c.Queue.NATS; q == nil || len(q.URLs) != 3 || time.Duration(q.AckWait) != 30*time.Second || q.Concurrency != 4 {
		t.Errorf("queue section: %+v", q)
	}
}

// TestQueueConfigRefusals: a bad queue field stops the config, named.
func TestQueueConfigRefusals(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"version": 1, "queue": {"nats": {}}}`:                                                               "queue.nats.urls",
		`{"version": 1, "queue": {"nats": {"urls": ["nats://h:1"], "ack_wait": "10ms"}}}`:                     "queue.nats.ack_wait",
		`{"version": 1, "max_concurrency": 2, "queue": {"nats": {"urls": ["nats://h:1"], "concurrency": 3}}}`: "queue.nats.concurrency",
		`{"version": 1, "queue": {"nats": {"urls": ["nats://h:1"], "password_file": "/nonexistent/pw"}}}`:     "queue.nats.",
		`{"version": 1, "queue": {"nats": {"urls": ["nats://h:1"], "stream": "a.b"}}}`:                        "queue.nats.stream",
		`{"version": 1, "queue": {"nats": {"urls": ["nats://h:1"], "acks": 1}}}`:                              "acks",
	} {
		_, err := ParseConfig(strings.NewReader(cfg))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", cfg, err, want)
		}
	}
}

// A job of the queue is admitted only when its tenant can start it now:
// its rate and its share refuse at once, taking nothing; a job that
// does not run gives back its slots and its rate's token, and one the
// daemon refuses for what it says its slots only.
func TestQueueAdmitTakesNoWait(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 2, "tenants": [
		{"name": "root", "match": {"uid": 0}, "max_concurrency": 1, "max_queue": 2, "rate": "1/min"},
		{"name": "b", "match": {"uid": 1}, "max_concurrency": 1, "max_queue": 2}]}`)
	a, _ := ts.Admit("root")
	if a == nil {
		t.Fatal("root's first job not admitted")
	}
	if again, wait := ts.Admit("root"); again != nil || wait <= 0 || wait > time.Minute {
		t.Fatalf("root's second job within its rate of 1/min: %v, wait %v; want none and a wait", again, wait)
	}
	a.Release()
	// The token and the slot are back.
	a, _ = ts.Admit("root")
	if a == nil {
		t.Fatal("root's job after a release not admitted")
	}
	b, _ := ts.Admit("b")
	if b == nil {
		t.Fatal("b's first job not admitted")
	}
	if again, wait := ts.Admit("b"); again != nil || wait != 0 {
		t.Fatalf("b's second job with its one slot taken: %v, wait %v; want none, wait unknown", again, wait)
	}
	running, queued, _, _ := ts.lim.stats()
	if running != 2 || queued != 0 {
		t.Errorf("global slots %d running, %d queued; want the 2 admitted, none queued", running, queued)
	}
	// A refused job gives its slots back, not its token: each costs the
	// worker a stored record and a publish, so refused jobs are held to
	// the tenant's rate too.
	var refusal *queue.Refusal
	if _, err := b.Execute(context.Background(), []byte(`{"runtime": "deno"}`)); !errors.As(err, &refusal) {
		t.Fatalf("a job without source: %v, want a refusal", err)
	}
	if b, _ = ts.Admit("b"); b == nil {
		t.Fatal("b's job after a refused one not admitted: its slot was not given back")
	}
	if _, err := a.Execute(context.Background(), []byte(`{"runtime": "deno"}`)); !errors.As(err, &refusal) {
		t.Fatalf("a job without source: %v, want a refusal", err)
	}
	if again, wait := ts.Admit("root"); again != nil || wait <= 0 {
		t.Fatalf("root's job after a refused one within its rate of 1/min: %v, wait %v; want none and a wait", again, wait)
	}
	b.Release()
	if running, _, _, _ := ts.lim.stats(); running != 0 {
		t.Errorf("%d global slots taken after every release", running)
	}
	// A tenant the daemon does not have is admitted, and refused.
	n, _ := ts.Admit("nobody")
	if n == nil {
		t.Fatal("an unknown tenant's job not admitted, to be refused")
	}
	if _, err := n.Execute(context.Background(), []byte(`{}`)); err == nil || !strings.Contains(err.Error(), `tenant "nobody"`) {
		t.Errorf("an unknown tenant's job: %v", err)
	}
	// Has tells the queue which subjects are strangers' (a consumer
	// of theirs only while their jobs are refused).
	for name, want := range map[string]bool{"root": true, "b": true, "nobody": false} {
		if got := ts.Has(name); got != want {
			t.Errorf("Has(%q) = %v, want %v", name, got, want)
		}
	}
}

// A queued job of a tenant the daemon does not have is refused with the
// names it does have, and "refuses others" only where the config does:
// with others allowed, the job belongs on the subject of `others`.
func TestQueueUnknownTenantNamesTheTenants(t *testing.T) {
	for _, c := range []struct {
		others string
		want   string
	}{
		{"allow", `tenant "nobody": no such tenant of this pmjail daemon (its tenants: ci, others; a job of no tenant is sent as tenant others)`},
		{"refuse", `tenant "nobody": no such tenant of this pmjail daemon (its tenants: ci), and its config refuses others (others: "refuse")`},
	} {
		ts := startServer(t, `{"version": 1, "max_concurrency": 2, "others": "`+c.others+`", "tenants": [
			{"name": "ci", "match": {"uid": 0}, "max_concurrency": 1}]}`)
		n, _ := ts.Admit("nobody")
		if n == nil {
			t.Fatalf("others %s: an unknown tenant's job not admitted, to be refused", c.others)
		}
		_, err := n.Execute(context.Background(), []byte(`{}`))
		var refusal *queue.Refusal
		if !errors.As(err, &refusal) || refusal.Message != c.want {
			t.Errorf("others %s: %v, want the refusal %q", c.others, err, c.want)
		}
	}
}

// An Admit refused for want of a global slot tells Freed nothing: it
// took its tenant's own slot for a moment and gave it back, and nothing
// freed. Told, the queue's worker (which tries a tenant refused for want
// of a slot again as soon as Freed says so) would try the same tenant
// again at once, be refused again and be told again: a scheduler
// spinning on a core for as long as the global slots stay taken. The
// shares fit in the global slots, but a reload that lowers them leaves
// the runs of before holding more than the new global bound.
func TestQueueAdmitRefusedTellsNoFreed(t *testing.T) {
	ts, release := globalSlotsHeld(t)
	select {
	case <-ts.Freed():
	default:
	}
	for i := range 3 {
		if a, wait := ts.Admit("root"); a != nil || wait != 0 {
			t.Fatalf("root's job with every global slot taken: %v, wait %v; want none, wait unknown", a, wait)
		}
		select {
		case <-ts.Freed():
			t.Fatalf("try %d: an Admit refused for want of a global slot told Freed: the worker tries again at once, for ever", i+1)
		default:
		}
	}
	// b's runs end: a global slot frees once both have (2 of 2 taken).
	release()
	select {
	case <-ts.Freed():
	default:
		t.Fatal("b's slots given back did not tell Freed")
	}
	a, _ := ts.Admit("root")
	if a == nil {
		t.Fatal("root's job with a global slot free not admitted")
	}
	a.Release()
}

// admitCounter is the daemon as the queue's worker sees it, its Admit
// calls counted.
type admitCounter struct {
	*Server
	calls atomic.Int64
	// tried closes at the first call.
	tried     chan struct{}
	firstCall sync.Once
}

func (a *admitCounter) Admit(tenant string) (queue.Admission, time.Duration) {
	a.calls.Add(1)
	a.firstCall.Do(func() { close(a.tried) })
	return a.Server.Admit(tenant)
}

// The queue's worker, with the daemon as its executor, does not spin
// while a tenant with a job in the stream is refused for want of a
// global slot: it tries it every retryEvery (50ms) and when a slot
// frees. Freed told by the refused Admit itself had it try again at
// once, for ever: hundreds of thousands of tries a second on a core.
func TestQueueWorkerRefusedForAGlobalSlotIdles(t *testing.T) {
	ts, _ := globalSlotsHeld(t)

	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	qcfg := queue.Config{URLs: []string{ns.ClientURL()}, AckWait: api.Duration(5 * time.Second), Concurrency: 1}
	if err := qcfg.Check(1); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := queue.Provision(ctx, qcfg, queue.Layout{Replicas: 1, MaxJobs: 100, History: 5}); err != nil {
		t.Fatal(err)
	}
	c, err := queue.Dial(ctx, qcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Submit(ctx, "root", queue.NewID(), &api.Job{Runtime: "deno", Source: "1"}); err != nil {
		t.Fatal(err)
	}
	exec := &admitCounter{Server: ts.Server, tried: make(chan struct{})}
	w, err := queue.NewWorker(ctx, &qcfg, exec, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Stop(time.Second)
	// The worker finds root's job and is refused; then a second.
	select {
	case <-exec.tried:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker never tried root's job")
	}
	before := exec.calls.Load()
	time.Sleep(time.Second)
	// Every 50ms, and at the looks at the stream: some 20 a second.
	n := exec.calls.Load() - before
	if n > 100 {
		t.Fatalf("%d tries of a tenant refused for want of a global slot in a second: the worker spins", n)
	}
	t.Logf("%d tries in a second", n)
}

// globalSlotsHeld is a daemon whose global slots are all held by tenant
// b's two queue jobs after a reload lowered max_concurrency from 4 to 2
// under them: tenant root's share has room, the global slots none.
// release ends b's jobs (at the test's end if not before).
func globalSlotsHeld(t *testing.T) (ts *testServer, release func()) {
	t.Helper()
	const tenants = `"tenants": [
		{"name": "root", "match": {"uid": 0}, "max_concurrency": %d},
		{"name": "b", "match": {"uid": 1}, "max_concurrency": %d}]`
	ts = startServer(t, `{"version": 1, "max_concurrency": 4, `+fmt.Sprintf(tenants, 2, 2)+`}`)
	var held []queue.Admission
	release = sync.OnceFunc(func() {
		for _, a := range held {
			a.Release()
		}
	})
	t.Cleanup(release)
	for range 2 {
		b, _ := ts.Admit("b")
		if b == nil {
			t.Fatal("b's job not admitted")
		}
		held = append(held, b)
	}
	cfg, err := ParseConfig(strings.NewReader(`{"version": 1, "max_concurrency": 2, ` + fmt.Sprintf(tenants, 1, 1) + `}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Socket.Path = ts.sock
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	return ts, release
}
