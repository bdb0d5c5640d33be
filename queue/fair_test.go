package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// olderConsumer makes the consumer all workers of older versions shared
// (every tenant's subject), as they made it.
func olderConsumer(t *testing.T, c *Client, cfg Config) jetstream.Consumer {
	t.Helper()
	cons, err := c.js.CreateOrUpdateConsumer(context.Background(), cfg.Stream, jetstream.ConsumerConfig{
		Durable: cfg.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Duration(cfg.AckWait),
		MaxAckPending: cfg.MaxAckPending, MaxDeliver: cfg.MaxDeliver, FilterSubject: cfg.Subject + ".*", MaxWaiting: 512,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// fetchOne pulls one job as an older worker would.
func fetchOne(t *testing.T, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		return m
	}
	t.Fatalf("no job: %v", batch.Error())
	return nil
}

// An upgrade: the consumer of the older workers is retired once the jobs
// it handed out are acked, never while an older worker still holds one
// (its tenant's consumer would hand it out again: a second run); a job
// an older worker sent back as it stopped goes to the new worker.
func TestWorkerRetiresTheSharedConsumer(t *testing.T) {
	cfg, c := setup(t, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	older := olderConsumer(t, c, cfg)
	for _, id := range []string{"held", "sent-back"} {
		if err := c.Submit(ctx, "alice", id, &api.Job{Runtime: "deno", Source: id}); err != nil {
			t.Fatal(err)
		}
	}
	held := fetchOne(t, older)
	back := fetchOne(t, older)
	// An older worker stopping sends its job back.
	if err := back.Nak(); err != nil {
		t.Fatal(err)
	}
	// The held job's worker is alive: it says so, as its beats do.
	stopBeats := make(chan struct{})
	defer close(stopBeats)
	beats := make(chan struct{})
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopBeats:
				return
			case <-tick.C:
				_ = held.InProgress()
				select {
				case beats <- struct{}{}:
				case <-stopBeats:
					return
				}
			}
		}
	}()
	e := &echo{}
	startWorker(t, cfg, e)
	// The new worker pauses the older consumer and waits: while the held
	// job's worker beats, for three times the 2s the new worker waits for
	// a beat, the consumer stays.
	paused := false
	for n := 0; n < 30; n++ {
		<-beats
		info, err := older.Info(ctx)
		if err != nil {
			t.Fatalf("the older consumer after %d beats of its held job: %v", n, err)
		}
		paused = paused || info.Paused
	}
	if !paused {
		t.Errorf("the older consumer was not paused")
	}
	// The older worker ends its run: the new worker then retires the
	// consumer and takes the jobs.
	if err := held.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, "alice", "sent-back")
	if err != nil || res.Stdout != "sent-back" {
		t.Fatalf("the job sent back by the older worker: %+v %v", res, err)
	}
	// Its jobs taken only once the older consumer is gone.
	if _, err := c.js.Consumer(ctx, cfg.Stream, cfg.Consumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the older consumer after the upgrade: %v, want it deleted", err)
	}
	res, err = c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "after"})
	if err != nil || res.Stdout != "after" {
		t.Fatalf("a job after the upgrade: %+v %v", res, err)
	}
	waitEmpty(t, c, cfg)
	if n := e.calls.Load(); n != 2 {
		t.Errorf("the new worker ran %d jobs, want 2 (not the one the older worker held)", n)
	}
}

// A job on a subject whose last token is no tenant name is taken through
// a consumer of its own, named by the token's digest, and terminated
// unrun; the tenants' jobs run beside it.
func TestWorkerTerminatesASubjectOfNoTenant(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	e := &echo{}
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.js.Publish(ctx, cfg.Subject+".a@b", []byte(`{"runtime":"deno","source":"x"}`)); err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "beside"})
	if err != nil || res.Stdout != "beside" {
		t.Fatalf("a tenant's job beside it: %+v %v", res, err)
	}
	waitEmpty(t, c, cfg)
	if n := e.calls.Load(); n != 1 {
		t.Errorf("executor ran %d jobs, want 1 (the tenant's)", n)
	}
	name := ConsumerName(cfg.Consumer, "a@b")
	if !strings.HasPrefix(name, cfg.Consumer+"=") {
		t.Errorf("consumer of a subject of no tenant: %q", name)
	}
	if _, err := c.js.Consumer(ctx, cfg.Stream, name); err != nil {
		t.Errorf("consumer %s: %v", name, err)
	}
}
