package queue

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// One tenant's backlog does not fill the stream: past its bound the
// stream refuses that tenant's next job, and another tenant's job is
// still taken and run. The stream's bound of all jobs was the only one: a
// tenant that submitted max_msgs jobs (in a second: the stream takes them
// at NATS's speed, the tenant's rate counts only as they run) had every
// other tenant's submit refused until its backlog drained at its rate,
// or for the stream's max_age.
func TestOneTenantCannotFillTheStream(t *testing.T) {
	url := startNATS(t)
	cfg := Config{URLs: []string{url}, Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const maxJobs = 40
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: maxJobs}); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// No worker yet: hog's jobs wait, as they would behind its rate.
	hog, refused := 0, error(nil)
	for ; hog <= maxJobs && refused == nil; hog++ {
		refused = c.Submit(ctx, "hog", fmt.Sprintf("h%d", hog), &api.Job{Runtime: "deno", Source: "hog"})
	}
	if refused == nil {
		t.Fatalf("hog submitted %d jobs to a stream of %d: none refused", hog, maxJobs)
	}
	if err := c.Submit(ctx, "bob", "b1", &api.Job{Runtime: "deno", Source: "bob's"}); err != nil {
		t.Fatalf("bob's job refused once hog had %d waiting (hog's own refused: %v): %v", hog-1, refused, err)
	}
	if hog-1 >= maxJobs {
		t.Errorf("hog had %d jobs waiting, the whole stream", hog-1)
	}
	startWorker(t, cfg, &echo{})
	if res, err := c.Wait(ctx, "bob", "b1"); err != nil || res.Stdout != "bob's" {
		t.Errorf("bob's job: %+v %v", res, err)
	}

	// A worker on a stream without the bound says so.
	logs := workerWarns(t, c, cfg, cfg.Stream, func(sc *jetstream.StreamConfig) {
		sc.MaxMsgsPerSubject, sc.DiscardNewPerSubject = 0, false
	})
	if !strings.Contains(logs, "bounds no tenant's waiting jobs") {
		t.Errorf("a worker on a stream without a bound of one tenant's jobs said nothing of it: %s", logs)
	}
}

// workerWarns changes the config of the stream named stream as change
// does, then starts a worker of cfg and gives what it logged as it
// started.
func workerWarns(t *testing.T, c *Client, cfg Config, stream string, change func(*jetstream.StreamConfig)) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	change(&sc)
	if _, err := c.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	w, err := NewWorker(ctx, &cfg, admitAll{&echo{}}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.nc.Close()
	return logs.String()
}
