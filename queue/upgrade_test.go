package queue

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// sources is a runner that counts the runs of each job by its source.
type sources struct {
	echo
	mu  sync.Mutex
	ran map[string]int
}

func (s *sources) Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error) {
	var j api.Job
	if json.Unmarshal(body, &j) == nil {
		s.mu.Lock()
		if s.ran == nil {
			s.ran = map[string]int{}
		}
		s.ran[j.Source]++
		s.mu.Unlock()
	}
	return s.echo.Execute(ctx, tenant, body)
}

func (s *sources) runs(source string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran[source]
}

// submitAlice submits a Deno job of tenant alice whose id and source
// are id.
func submitAlice(ctx context.Context, t *testing.T, c *Client, id string) {
	t.Helper()
	if err := c.Submit(ctx, "alice", id, &api.Job{Runtime: "deno", Source: id}); err != nil {
		t.Fatal(err)
	}
}

// givenUp sends the older consumer's next job back at both of its
// deliveries (max_deliver 2), and checks the consumer then gives up on
// it: a poison job.
func givenUp(t *testing.T, older jetstream.Consumer) {
	t.Helper()
	nakAll(t, older, 2, 0)
	if b, err := older.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond)); err == nil {
		for m := range b.Messages() {
			t.Fatalf("the older consumer handed out %s a third time", m.Subject())
		}
	}
}

// nakAll pulls n jobs as an older worker would and sends each back (a
// worker that died running it, or stopped), delayed by after.
func nakAll(t *testing.T, cons jetstream.Consumer, n int, after time.Duration) {
	t.Helper()
	for range n {
		m := fetchOne(t, cons)
		var err error
		if after > 0 {
			err = m.NakWithDelay(after)
		} else {
			err = m.Nak()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// An upgrade keeps the deliveries the older consumer counted: a job it
// gave up on (max_deliver reached: a poison job) is never run by the
// tenants' consumers, whose counts start again at one; a job it handed
// out for the last time, sent back by its older worker stopping while
// the new worker retires the consumer, is not run either; one sent back
// after its first delivery runs once more. Before, both were handed out
// afresh, up to max_deliver more times.
func TestWorkerKeepsTheOlderConsumersDeliveries(t *testing.T) {
	cfg, c := setup(t, time.Second)
	cfg.MaxDeliver = 2
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	older := olderConsumer(t, c, cfg)
	submit := func(id string) { submitAlice(ctx, t, c, id) }
	// The poison job: two deliveries, each its worker's end; the older
	// consumer then gives up on it.
	submit("poison")
	givenUp(t, older)
	// Two held by live older workers: one at its first delivery, one
	// at its last.
	submit("sent-back")
	submit("last-try")
	first := fetchOne(t, older)
	nakAll(t, older, 1, 0)
	last := fetchOne(t, older)
	for _, m := range []jetstream.Msg{first, last} {
		beatFor(t, m, 200*time.Millisecond)
	}
	if md, _ := last.Metadata(); md == nil || md.NumDelivered != 2 {
		t.Fatalf("the held job's metadata: %+v, want its second delivery", md)
	}
	s := &sources{}
	w, err := NewWorker(ctx, &cfg, admitAll{s}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Stop(time.Second)
	for {
		info, err := older.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Paused {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The older workers stop, sending their jobs back.
	for _, m := range []jetstream.Msg{first, last} {
		if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Wait(ctx, "alice", "sent-back")
	if err != nil || res.Stdout != "sent-back" {
		t.Fatalf("the job sent back once: %+v %v", res, err)
	}
	submit("after")
	if res, err := c.Wait(ctx, "alice", "after"); err != nil || res.Stdout != "after" {
		t.Fatalf("a job after the upgrade: %+v %v", res, err)
	}
	waitEmpty(t, c, cfg)
	for source, want := range map[string]int{"poison": 0, "last-try": 0, "sent-back": 1, "after": 1} {
		if n := s.runs(source); n != want {
			t.Errorf("job %s ran %d times on the new worker, want %d (max_deliver 2 in all)", source, n, want)
		}
	}
}

// holder runs a job of source "hold" until released, others as echo
// does.
type holder struct {
	echo
	began   chan struct{}
	release chan struct{}
}

func (h *holder) Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error) {
	if strings.Contains(string(body), `"hold"`) {
		h.began <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.echo.Execute(ctx, tenant, body)
}

// Workers whose configs have other tenants: one without tenant bob sees
// bob's jobs as a stranger's, and must leave bob's consumer, made by the
// worker that has bob, as it is: not refuse its jobs, which that worker
// runs, nor update it to expire when idle, nor delete it once drained
// (the worker that has bob may be pulling from it). Before, it did all
// three: bob's job was refused while a worker that has bob was busy.
func TestWorkerLeavesAConsumerAWorkerOfItsTenantMade(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := &holder{began: make(chan struct{}, 1), release: make(chan struct{})}
	defer func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	}()
	hasBob, err := NewWorker(ctx, &cfg, tenantsOf{h, map[string]bool{"bob": true}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	hasBob.Start()
	defer hasBob.Stop(time.Second)
	if err := c.Submit(ctx, "bob", "hold", &api.Job{Runtime: "deno", Source: "hold"}); err != nil {
		t.Fatal(err)
	}
	<-h.began
	name := ConsumerName(cfg.Consumer, "bob")
	bobs, err := c.js.Consumer(ctx, cfg.Stream, name)
	if err != nil {
		t.Fatal(err)
	}
	made := bobs.CachedInfo().Created
	// A worker without bob, its one slot free, while bob's worker is busy.
	e := &echo{}
	other, err := NewWorker(ctx, &cfg, tenantsOf{e, map[string]bool{"alice": true}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	other.Start()
	defer other.Stop(time.Second)
	if err := c.Submit(ctx, "bob", "next", &api.Job{Runtime: "deno", Source: "next"}); err != nil {
		t.Fatal(err)
	}
	// The other worker runs alice's job after bob's was stored: it has
	// seen bob's subject with jobs by then (notices come in order).
	if res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "a"}); err != nil || res.Stdout != "a" {
		t.Fatalf("alice's job: %+v %v", res, err)
	}
	close(h.release)
	for _, id := range []string{"hold", "next"} {
		res, err := c.Wait(ctx, "bob", id)
		if err != nil || res.Stdout != id || res.Status != api.StatusOK {
			t.Errorf("bob's job %s: %+v %v, want it run by bob's worker", id, res, err)
		}
	}
	waitEmpty(t, c, cfg)
	// The other worker's drained strangers are dropped: alice's job and
	// another look at the stream after bob's are done.
	if res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "b"}); err != nil || res.Stdout != "b" {
		t.Fatalf("alice's job: %+v %v", res, err)
	}
	info, err := bobs.Info(ctx)
	switch {
	case err != nil:
		t.Errorf("bob's consumer after the other worker drained bob's subject: %v, want it kept", err)
	case !info.Created.Equal(made):
		t.Errorf("bob's consumer made again at %v (first at %v): another worker deleted it", info.Created, made)
	case info.Config.InactiveThreshold != 0:
		t.Errorf("bob's consumer expires when idle for %v: another worker updated it", info.Config.InactiveThreshold)
	}
}

// The record of a retirement is of the stream it was made on. An
// operator who deletes the stream and makes it again (Provision), the
// bucket kept, starts its sequences again at 1: the record's jobs are
// not the new stream's. Before, a new job at the sequence of a job the
// older consumer gave up on was terminated unrun, without a result, by
// every worker for as long as the bucket kept the record (its ttl).
func TestWorkerForgetsTheRetirementOfAStreamMadeAgain(t *testing.T) {
	cfg, c := setup(t, time.Second)
	cfg.MaxDeliver = 2
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	older := olderConsumer(t, c, cfg)
	submit := func(id string) { submitAlice(ctx, t, c, id) }
	// A poison job the older consumer gave up on, at sequence 1.
	submit("poison")
	givenUp(t, older)
	s := &sources{}
	w, err := NewWorker(ctx, &cfg, admitAll{s}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	// Retired and recorded: the poison job is terminated unrun.
	waitEmpty(t, c, cfg)
	if _, err := resultsKV(t, c).Get(ctx, retiredKey(cfg.Consumer)); err != nil {
		t.Fatalf("the retirement's record: %v", err)
	}
	if n := s.runs("poison"); n != 0 {
		t.Fatalf("the poison job ran %d times", n)
	}
	// The operator makes the stream again; the bucket stays. The new
	// job is sequence 1 of the new stream, and no consumer of older
	// workers ever handed it out.
	if err := c.js.DeleteStream(ctx, cfg.Stream); err != nil {
		t.Fatal(err)
	}
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100, History: 5}); err != nil {
		t.Fatal(err)
	}
	submit("fresh")
	// The worker that was running, then one started afresh, each run it.
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if res, err := c.Wait(wctx, "alice", "fresh"); err != nil || res.Stdout != "fresh" {
		t.Fatalf("a job of the stream made again, on the worker that ran: %+v %v, want it run", res, err)
	}
	w.Stop(time.Second)
	submit("fresh-2")
	startWorker(t, cfg, s)
	wctx2, wcancel2 := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel2()
	if res, err := c.Wait(wctx2, "alice", "fresh-2"); err != nil || res.Stdout != "fresh-2" {
		t.Fatalf("a job of the stream made again, on a worker started since: %+v %v, want it run", res, err)
	}
}

// Workers started together (the three of deploy/queue, upgraded at
// once) each retire the older consumer: each pauses it, watches its
// acks and, once no job of it is held, records what it counted and
// deletes it. Each appended a record of its own, so a job's older
// deliveries were counted once per worker that recorded before the
// first deleted it: a job sent back after one delivery counted two, and
// with max_deliver 2 was terminated unrun, with no result, at its first
// delivery by its tenant's consumer (seen 1 run in 4 without the
// hook below, which holds the first recorder until the second has
// recorded too). The workers record one retirement of the consumer.
func TestWorkersRetiringTogetherRecordItOnce(t *testing.T) {
	cfg, c := setup(t, time.Second)
	cfg.MaxDeliver = 2
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	older := olderConsumer(t, c, cfg)
	submitAlice(ctx, t, c, "sent-back")
	held := fetchOne(t, older)
	beatFor(t, held, 200*time.Millisecond)
	// The first worker to record waits for the other's record (or 5 s:
	// the other may find the consumer gone first, and not record).
	var mu sync.Mutex
	recorded := 0
	both := make(chan struct{})
	retireRecorded = func() {
		mu.Lock()
		if recorded++; recorded == 2 {
			close(both)
		}
		mu.Unlock()
		select {
		case <-both:
		case <-time.After(5 * time.Second):
		}
	}
	defer func() { retireRecorded = nil }()
	s := &sources{}
	for range 2 {
		startWorker(t, cfg, s)
	}
	for {
		info, err := older.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Paused {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Its older worker stops, sending it back: its one delivery so far.
	if err := held.Nak(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	res, err := c.Wait(wctx, "alice", "sent-back")
	if err != nil || res.Stdout != "sent-back" {
		t.Errorf("the job sent back after one delivery: %+v %v, want it run once more (max_deliver 2 in all)", res, err)
	}
	e, err := resultsKV(t, c).Get(ctx, retiredKey(cfg.Consumer))
	if err != nil {
		t.Fatal(err)
	}
	var all []retirement
	if err := json.Unmarshal(e.Value(), &all); err != nil || len(all) != 1 {
		t.Errorf("the record of the retirement: %s (%v), want one retirement", e.Value(), err)
	}
	if n := s.runs("sent-back"); n != 1 {
		t.Errorf("the job sent back ran %d times on the new workers, want 1", n)
	}
}
