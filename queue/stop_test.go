package queue

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/pmjail/pmjail/api"
)

// gate is a runner whose run starts, says so, and ends when let go.
type gate struct {
	started chan struct{}
	release chan struct{}
}

func (g *gate) Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error) {
	close(g.started)
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &api.Result{Status: api.StatusOK, Logs: []api.LogEntry{}}, nil
}

// A worker told to stop while NATS is unreachable stops soon after its
// grace: a run that ended and cannot store its result sends its job
// back, rather than retrying the store for minutes after the grace (its
// service manager would kill it, or an operator wait on it).
func TestStopWithNATSGoneKeepsToGrace(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(ns.Shutdown)
	cfg := Config{URLs: []string{ns.ClientURL()}, AckWait: api.Duration(30 * time.Second), Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100, History: 5}); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := &gate{started: make(chan struct{}), release: make(chan struct{})}
	w, err := NewWorker(ctx, &cfg, admitAll{g}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	if err := c.Submit(ctx, "alice", NewID(), &api.Job{Runtime: "deno", Source: "1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.started:
	case <-ctx.Done():
		t.Fatal("the job never started")
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	// The run ends with no server to store its result in.
	close(g.release)
	const grace = time.Second
	start := time.Now()
	w.Stop(grace)
	// The store's try under way when the runs are cancelled, the ack's
	// and the connection's drain each wait at most opTimeout.
	if took, bound := time.Since(start), grace+3*opTimeout; took > bound {
		t.Errorf("Stop(%v) with NATS gone took %v, want at most %v", grace, took.Round(time.Millisecond), bound)
	}
}
