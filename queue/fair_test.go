package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	beats := beatFor(t, held, 200*time.Millisecond)
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
// unrun, the consumer deleted once drained; the tenants' jobs run beside
// it.
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
	// Drained, it is deleted: a subject of no tenant has a consumer only
	// while its jobs are terminated.
	for {
		_, err := c.js.Consumer(ctx, cfg.Stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("consumer %s once drained: %v, want it deleted", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tenantsOf is the Executor of a daemon that has the tenants named: the
// jobs of any other are admitted and refused, as server.Admit does.
type tenantsOf struct {
	r       runner
	tenants map[string]bool
}

func (a tenantsOf) Admit(tenant string) (Admission, time.Duration) {
	if !a.tenants[tenant] {
		return refuser{tenant}, 0
	}
	return admitted{a.r, tenant}, 0
}

func (a tenantsOf) Has(tenant string) bool { return a.tenants[tenant] }

func (tenantsOf) Freed() <-chan struct{} { return nil }

type refuser struct{ tenant string }

func (r refuser) Execute(context.Context, []byte) (*api.Result, error) {
	return nil, &Refusal{Code: api.CodeForbidden, Message: "tenant " + r.tenant + ": no such tenant"}
}

func (refuser) Release() {}

// consumers counts the stream's consumers.
func consumers(t *testing.T, c *Client, cfg Config) int {
	t.Helper()
	n, err := countConsumers(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func countConsumers(c *Client, cfg Config) (int, error) {
	s, err := c.js.Stream(context.Background(), cfg.Stream)
	if err != nil {
		return 0, err
	}
	n := 0
	names := s.ConsumerNames(context.Background())
	for range names.Name() {
		n++
	}
	return n, names.Err()
}

// A publisher allowed many subjects (a tenant given pmjail.jobs.* by a
// careless operator) sends one job on each of 60: the workers make no
// durable consumer per subject for ever, only a bounded few while the
// jobs of tenants they do not have are refused, each deleted once its
// subject is drained; every job is refused, and the tenant's job runs.
func TestWorkerBoundsTheConsumersOfStrangers(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const subjects = 60
	for i := range subjects {
		if err := c.Submit(ctx, fmt.Sprintf("s%02d", i), "x", &api.Job{Runtime: "deno", Source: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	e := &echo{}
	w, err := NewWorker(ctx, &cfg, tenantsOf{e, map[string]bool{"alice": true}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// The consumers while they are refused, at most.
	peak := 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if n, err := countConsumers(c, cfg); err == nil {
					peak = max(peak, n)
				}
			}
		}
	}()
	w.Start()
	defer w.Stop(time.Second)
	res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "own"})
	if err != nil || res.Stdout != "own" {
		t.Fatalf("alice's job: %+v %v", res, err)
	}
	for i := range subjects {
		res, err := c.Wait(ctx, fmt.Sprintf("s%02d", i), "x")
		if err != nil || res.Error == nil || res.Error.Code != api.CodeForbidden {
			t.Fatalf("job of s%02d: %+v %v", i, res, err)
		}
	}
	waitEmpty(t, c, cfg)
	// The strangers' consumers go once drained: alice's stays.
	for n := consumers(t, c, cfg); n != 1; n = consumers(t, c, cfg) {
		if ctx.Err() != nil {
			t.Fatalf("%d consumers once every job is done, want 1 (alice's)", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	<-sampled
	if peak > 17 {
		t.Errorf("%d consumers at once, want at most 17 (alice's and 16 strangers')", peak)
	}
	if n := e.calls.Load(); n != 1 {
		t.Errorf("executor ran %d jobs, want 1", n)
	}
}

// A job published on a subject whose last token is a wildcard, as a
// literal ('*', '>': a publisher allowed pmjail.jobs.> may), gets no
// consumer: one would take, and terminate, every tenant's jobs, and keep
// any tenant's consumer from being made. It is left in the stream; the
// tenants' jobs run.
func TestWorkerLeavesAWildcardToken(t *testing.T) {
	for _, tok := range []string{"*", ">"} {
		t.Run(tok, func(t *testing.T) {
			cfg, c := setup(t, 5*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := c.js.Publish(ctx, cfg.Subject+"."+tok, []byte(`{"runtime":"deno","source":"x"}`)); err != nil {
				t.Fatal(err)
			}
			logs := &logBuf{}
			e := &echo{}
			w, err := NewWorker(ctx, &cfg, admitAll{e}, slog.New(slog.NewTextHandler(logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			w.Start()
			defer w.Stop(time.Second)
			// The worker has seen it: it said so, or made its consumer.
			for !strings.Contains(logs.String(), "wildcard token") && consumers(t, c, cfg) == 0 {
				if ctx.Err() != nil {
					t.Fatal("the worker never saw the job")
				}
				time.Sleep(20 * time.Millisecond)
			}
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			res, err := c.Run(rctx, "alice", &api.Job{Runtime: "deno", Source: "own"})
			if err != nil || res.Stdout != "own" {
				t.Fatalf("alice's job after a job on %s: %+v %v", cfg.Subject+"."+tok, res, err)
			}
			s, err := c.js.Stream(ctx, cfg.Stream)
			if err != nil {
				t.Fatal(err)
			}
			names := s.ListConsumers(ctx)
			for ci := range names.Info() {
				if f := ci.Config.FilterSubject; f != cfg.Subject+".alice" {
					t.Errorf("consumer %s of %s", ci.Name, f)
				}
			}
			if n := e.calls.Load(); n != 1 {
				t.Errorf("executor ran %d jobs, want 1", n)
			}
		})
	}
}

// A worker that dies while it retires the older workers' consumer (its
// connection gone at once, as a SIGKILL leaves it) leaves the consumer
// paused no longer than a short lease: the older workers take jobs
// again, not a day later.
func TestWorkerRetirementPauseIsALease(t *testing.T) {
	cfg, c := setup(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	older := olderConsumer(t, c, cfg)
	if err := c.Submit(ctx, "alice", "held", &api.Job{Runtime: "deno", Source: "held"}); err != nil {
		t.Fatal(err)
	}
	held := fetchOne(t, older)
	// Its older worker beats for it.
	beatFor(t, held, 300*time.Millisecond)
	w, err := NewWorker(ctx, &cfg, admitAll{&echo{}}, slog.New(slog.DiscardHandler))
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
		if ctx.Err() != nil {
			t.Fatal("the older consumer never paused")
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.nc.Close()
	info, err := older.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if until := info.Config.PauseUntil; until == nil || time.Until(*until) > 20*time.Second {
		t.Errorf("the older consumer paused until %v by a worker now gone, want within 20s", until)
	}
}

// counted is an Executor whose every admission must be used exactly
// once: executed, or released.
type counted struct {
	r       runner
	blocked string // a tenant never admitted
	mu      sync.Mutex
	issued  []*countedAdm
}

type countedAdm struct {
	r      runner
	tenant string
	used   atomic.Int32
}

func (c *counted) Admit(tenant string) (Admission, time.Duration) {
	if tenant == c.blocked {
		return nil, 0
	}
	a := &countedAdm{r: c.r, tenant: tenant}
	c.mu.Lock()
	c.issued = append(c.issued, a)
	c.mu.Unlock()
	return a, 0
}

func (*counted) Has(string) bool { return true }

func (*counted) Freed() <-chan struct{} { return nil }

func (a *countedAdm) Execute(ctx context.Context, body []byte) (*api.Result, error) {
	a.used.Add(1)
	return a.r.Execute(ctx, a.tenant, body)
}

func (a *countedAdm) Release() { a.used.Add(1) }

// later sends a job of source "later" back once, and runs one of source
// "cut" until the worker stops.
type later struct {
	echo
	sent  atomic.Bool
	began chan struct{}
}

func (e *later) Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error) {
	switch {
	case strings.Contains(string(body), `"later"`) && !e.sent.Swap(true):
		return nil, &Later{After: 100 * time.Millisecond, Reason: "test"}
	case strings.Contains(string(body), `"cut"`):
		e.began <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return e.echo.Execute(ctx, tenant, body)
}

// What an admission took goes back on every path: a job run, refused
// by the executor or for its id, sent back for later, found done, a
// pull that finds no job or fails (its consumer deleted), a run cut
// short by the worker's stop; a tenant never admitted holds up no
// other.
func TestWorkerUsesEveryAdmissionOnce(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lt := &later{began: make(chan struct{}, 1)}
	ex := &counted{r: lt, blocked: "blocked"}
	if err := c.Submit(ctx, "blocked", "b", &api.Job{Runtime: "deno", Source: "b"}); err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(ctx, &cfg, ex, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	stopped := false
	defer func() {
		if !stopped {
			w.Stop(time.Second)
		}
	}()
	run := func(src string) {
		t.Helper()
		res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: src})
		if err != nil || res.Stdout != src {
			t.Fatalf("job %s: %+v %v", src, res, err)
		}
	}
	run("one")
	run("later")
	// Refused by the executor, and for its id.
	if err := c.Submit(ctx, "alice", "bad", &api.Job{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "alice", "bad"); err != nil {
		t.Fatal(err)
	}
	ack, err := c.js.Publish(ctx, cfg.Subject+".alice", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "alice", "seq="+itoa(ack.Sequence)); err != nil {
		t.Fatal(err)
	}
	// Found done: the same job again, not as a duplicate.
	msg := &nats.Msg{Subject: cfg.Subject + ".alice", Header: nats.Header{HeaderID: []string{"bad"}}, Data: []byte(`{}`)}
	if _, err := c.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	// Its consumer deleted under the worker: the pull fails, and the
	// consumer is made again.
	if err := c.js.DeleteConsumer(ctx, cfg.Stream, ConsumerName(cfg.Consumer, "alice")); err != nil {
		t.Fatal(err)
	}
	run("after-delete")
	// A run cut short by the stop.
	if err := c.Submit(ctx, "alice", "cut", &api.Job{Runtime: "deno", Source: "cut"}); err != nil {
		t.Fatal(err)
	}
	<-lt.began
	w.Stop(200 * time.Millisecond)
	stopped = true
	// The tenant never admitted: its job waits, delivered to no one.
	bc, err := c.js.Consumer(ctx, cfg.Stream, ConsumerName(cfg.Consumer, "blocked"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := bc.Info(ctx); err != nil || info.Delivered.Consumer != 0 || info.NumPending != 1 {
		t.Errorf("the job of the tenant never admitted: %+v %v, want 1 pending, none delivered", info, err)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	for i, a := range ex.issued {
		if n := a.used.Load(); n != 1 {
			t.Errorf("admission %d of %s used %d times, want 1", i, a.tenant, n)
		}
	}
	t.Logf("%d admissions", len(ex.issued))
}

// Odd last tokens (a name of no tenant, unicode, '=', one of 2000
// characters) are each taken through a consumer named by their digest,
// their jobs refused or terminated unrun, and the consumers deleted once
// drained; the tenant's job runs beside them.
func TestWorkerTakesOddTokens(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := &echo{}
	w, err := NewWorker(ctx, &cfg, tenantsOf{e, map[string]bool{"alice": true}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Stop(time.Second)
	for _, tok := range []string{"a@b", "é", "a=b", strings.Repeat("x", 2000), "x=" + strings.Repeat("é", 500)} {
		msg := &nats.Msg{Subject: cfg.Subject + "." + tok, Header: nats.Header{HeaderID: []string{"odd"}}, Data: []byte(`{"runtime":"deno","source":"x"}`)}
		if _, err := c.js.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("%.20s: %v", tok, err)
		}
	}
	res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "own"})
	if err != nil || res.Stdout != "own" {
		t.Fatalf("alice's job: %+v %v", res, err)
	}
	// The valid name of no tenant of the worker's is refused.
	res, err = c.Wait(ctx, strings.Repeat("x", 2000), "odd")
	if err != nil || res.Error == nil || res.Error.Code != api.CodeForbidden {
		t.Errorf("the job of a 2000-character tenant: %+v %v", res, err)
	}
	waitEmpty(t, c, cfg)
	for n := consumers(t, c, cfg); n != 1; n = consumers(t, c, cfg) {
		if ctx.Err() != nil {
			t.Fatalf("%d consumers once every job is done, want 1 (alice's)", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := e.calls.Load(); n != 1 {
		t.Errorf("executor ran %d jobs, want 1", n)
	}
}

// An older worker started after the new ones retired its consumer, and
// before any tenant's consumer was made, makes it again (the stream
// lets it: nothing overlaps yet); once it stops, the new workers must
// not stall on a consumer no worker pulls from, which keeps every
// tenant's consumer from being made: they retire it again.
func TestWorkerRetiresASharedConsumerMadeAgain(t *testing.T) {
	cfg, c := setup(t, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := &echo{}
	w, err := NewWorker(ctx, &cfg, tenantsOf{e, map[string]bool{"alice": true}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Stop(time.Second)
	// The worker is past its retirement once it has refused a job of a
	// tenant it has not, whose consumer is then deleted: no consumer is
	// left for the older one to overlap.
	if err := c.Submit(ctx, "zed", "z", &api.Job{Runtime: "deno", Source: "z"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "zed", "z"); err != nil {
		t.Fatal(err)
	}
	for consumers(t, c, cfg) != 0 {
		if ctx.Err() != nil {
			t.Fatal("the stranger's consumer never went")
		}
		time.Sleep(20 * time.Millisecond)
	}
	olderConsumer(t, c, cfg)
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	res, err := c.Run(rctx, "alice", &api.Job{Runtime: "deno", Source: "after"})
	if err != nil || res.Stdout != "after" {
		t.Fatalf("a job after an older worker made its consumer again: %+v %v", res, err)
	}
	if _, err := c.js.Consumer(ctx, cfg.Stream, cfg.Consumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the older consumer: %v, want it deleted", err)
	}
}

// beatFor sends held's in-progress acks every period, as a live worker
// running it does, until the test ends; each beat is offered on the
// channel returned (dropped when no one waits for it).
func beatFor(t *testing.T, held jetstream.Msg, every time.Duration) <-chan struct{} {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	beats := make(chan struct{}, 1)
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = held.InProgress()
				select {
				case beats <- struct{}{}:
				default:
				}
			}
		}
	}()
	return beats
}

// A tenant refused for want of a slot is tried again as soon as a slot
// frees (Executor.Freed), not after retryEvery; one refused for its rate
// waits its time. Without it a worker whose run had answered but not yet
// been torn down (its slot held) waited retryEvery after every job: one
// worker of two slots ran ~0.66x the socket's rate, not ~0.95x.
func TestWorkerTriesATenantAgainWhenASlotFrees(t *testing.T) {
	w := &Worker{lanes: map[string]*lane{}, exec: slotless{rate: map[string]time.Duration{"paced": time.Minute}}}
	for _, tenant := range []string{"full", "paced"} {
		w.lanes[tenant] = &lane{tenant: tenant, jobs: true, cons: noConsumer{}}
		w.order = append(w.order, tenant)
	}
	if msg, _, _ := w.take(t.Context()); msg != nil {
		t.Fatal("a job pulled without an admission")
	}
	full, paced := w.lanes["full"], w.lanes["paced"]
	if !full.forSlot || full.after.IsZero() || paced.forSlot || paced.after.IsZero() {
		t.Fatalf("after the refusals: full %+v, paced %+v", *full, *paced)
	}
	w.slotFreed()
	if !full.after.IsZero() || full.forSlot {
		t.Errorf("a slot freed: the tenant refused for want of one waits until %v", full.after)
	}
	if paced.after.IsZero() {
		t.Error("a slot freed: the tenant refused for its rate is tried at once")
	}
}

// slotless admits no tenant: a tenant of rate waits its time, any other
// waits for a slot (0).
type slotless struct{ rate map[string]time.Duration }

func (s slotless) Admit(tenant string) (Admission, time.Duration) { return nil, s.rate[tenant] }
func (slotless) Has(string) bool                                  { return true }
func (slotless) Freed() <-chan struct{}                           { return nil }

// noConsumer is a lane's consumer that is never pulled from.
type noConsumer struct{ jetstream.Consumer }
