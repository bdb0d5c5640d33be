package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/jsonstr"
)

// Executor runs the queue's jobs: the daemon, with its tenants'
// ceilings, shares and rates. The worker pulls a tenant's job only once
// Admit has taken what the job needs to start, so that a tenant that
// cannot start one now holds up no other tenant's.
type Executor interface {
	// Admit takes at once what a job of tenant needs to start now (a
	// token of its rate, a slot of its share and a global one), or
	// returns nil and how long until it might (0: not known, such as
	// until a run ends). A tenant the executor does not have is
	// admitted, and its Execute refuses the job.
	Admit(tenant string) (Admission, time.Duration)
	// Has reports whether the executor has the tenant (others'
	// included): a subject of a tenant it has not gets a consumer only
	// while its jobs are being refused, and at most maxStrangers such
	// consumers at once.
	Has(tenant string) bool
}

// Admission is what Admit took for one job of its tenant. Exactly one of
// Execute and Release is called.
type Admission interface {
	// Execute runs the job with what Admit took, and gives it back. A
	// job it refuses (not a valid job, a tenant it does not have) is a
	// *Refusal; a job it cannot take now is a *Later; any other error
	// means the job was not run to its end (the daemon is stopping) and
	// goes back to the stream.
	Execute(ctx context.Context, body []byte) (*api.Result, error)
	// Release gives back what Admit took, for a job that does not run.
	Release()
}

// Refusal is a job refused for what it is: it never runs, and its result
// says why.
type Refusal struct {
	Code    string // an api.Code* value
	Message string
	Field   string // the job's field at fault, if one is
}

func (r *Refusal) Error() string { return r.Message }

// Later is a job the executor cannot take now (every slot and queue
// place taken): it goes back to the stream for After.
type Later struct {
	After  time.Duration
	Reason string
}

func (l *Later) Error() string { return l.Reason }

// The worker's timings.
const (
	// scanEvery is how often a worker with a free slot looks for the
	// tenants that have jobs in the stream when the stream sends no
	// notice of its jobs: how long a job may then wait for an idle
	// worker to see it.
	scanEvery = 250 * time.Millisecond
	// rescanEvery is how often it looks when the stream sends notices,
	// for a notice missed (the connection lost, a notice dropped).
	rescanEvery = 5 * time.Second
	// noticeRetry is how soon a tenant noticed whose pull found no job
	// is pulled once more: the consumer's replica may not have the job
	// quite yet.
	noticeRetry = 100 * time.Millisecond
	// maxStrangers bounds the consumers a worker has at once of
	// subjects of tenants its executor has not (or of no tenant name):
	// they take no more than their jobs' refusals, and are deleted once
	// drained, so that a publisher on many subjects makes no unbounded
	// number of durable consumers.
	maxStrangers = 16
	// strangerIdle is the inactive threshold of such a consumer: one a
	// worker left behind (it died) is deleted by the server.
	strangerIdle = time.Minute
	// retryEvery is how soon a tenant whose admission did not say how
	// long to wait (its slots are taken) is tried again; a run of this
	// worker that ends tries at once.
	retryEvery = 50 * time.Millisecond
	// storeTries and storeBackoff bound the retries of a result's store
	// while the cluster elects a new leader after a node went away.
	storeTries   = 20
	storeBackoff = 250 * time.Millisecond
	// retireLease is how long the pause of the older workers' consumer
	// lasts unless renewed: a worker that dies while retiring it leaves
	// it paused no longer.
	retireLease = 15 * time.Second
	// retireWait bounds how long a worker waits for the workers of an
	// older version to end the runs of the jobs they hold.
	retireWait = 2 * time.Minute
	// retireAgain is how long the older workers go on before the next try.
	retireAgain = 10 * time.Second
	// opTimeout bounds one request to JetStream.
	opTimeout = 5 * time.Second
	// resultSlack is the room left in a message for the result's framing
	// when its output is cut to fit.
	resultSlack = 4 << 10
)

// Worker pulls the config's jobs and runs them with an Executor.
type Worker struct {
	cfg  Config
	exec Executor
	log  *slog.Logger

	nc     *nats.Conn
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream

	// lanes are the tenants seen in the stream, by their subject's last
	// token, each with its consumer; order is the round of them. Only
	// the scheduling goroutine uses them.
	lanes map[string]*lane
	order []string
	next  int
	// strangers counts the lanes of strangers (lane.stranger).
	strangers int
	// crowded: the last look passed over a stranger for want of a
	// place.
	crowded bool
	// shared: the consumer of older workers was found again.
	shared bool
	// wildWarned: the log said jobs on a wildcard token are left.
	wildWarned bool
	// ended wakes the scheduler when a run of this worker ends.
	ended chan struct{}
	// notices are the tenants of the jobs the stream republished
	// notices of; missed is set when one may have been lost.
	notices chan string
	missed  atomic.Bool
	// noticeSubject is what the stream republishes its jobs' notices
	// on; "" for none.
	noticeSubject string

	// stop ends the pulls; cancel the runs in flight.
	stop, cancel context.CancelFunc
	runCtx       context.Context
	// closed closes with the connection.
	closed  chan struct{}
	pulling sync.WaitGroup
}

// lane is one tenant's jobs: its subject of the stream and the durable
// consumer of that subject all workers share.
type lane struct {
	tenant string
	cons   jetstream.Consumer
	// jobs: the stream may hold jobs of the tenant not handed out yet.
	jobs bool
	// after is when the tenant's admission may be tried again.
	after time.Time
	// warned: its consumer could not be made, and the log said so.
	warned bool
	// stranger: a tenant the executor has not, or no tenant name.
	stranger bool
	// noticed is when a notice of a job of the tenant came; retried
	// that its pull found none since.
	noticed time.Time
	retried bool
	// drained: a stranger's pull found no job; its consumer is deleted
	// if none is pending or held.
	drained bool
	dropAt  time.Time
}

// NewWorker connects to the config's servers (cfg checked by Check) and
// binds the stream and the bucket; it starts nothing.
func NewWorker(ctx context.Context, cfg *Config, exec Executor, log *slog.Logger) (*Worker, error) {
	w := &Worker{cfg: *cfg, exec: exec, log: log, closed: make(chan struct{}),
		lanes: map[string]*lane{}, ended: make(chan struct{}, 1), notices: make(chan string, noticeBuffer)}
	var err error
	// The connection's events go to the daemon's log, whose every line is
	// JSON, not to the client's default print.
	w.nc, err = connect(cfg, "pmjail worker",
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("queue: nats", "err", err) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("queue: disconnected from nats", "err", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			// Notices sent meanwhile are lost: the next free slot looks.
			w.missed.Store(true)
			log.Info("queue: reconnected to nats", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(w.closed) }),
		nats.PermissionErrOnSubscribe(true))
	if _, ok := errors.AsType[*connectError](err); ok {
		return nil, fmt.Errorf("queue.nats.urls: %w", err)
	}
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			w.nc.Close()
		}
	}()
	if w.js, err = jetstream.New(w.nc); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if w.stream, err = w.js.Stream(ctx, cfg.Stream); err != nil {
		return nil, fmt.Errorf("queue.nats.stream: %s: %w", cfg.Stream, err)
	}
	if w.kv, err = w.js.KeyValue(ctx, cfg.Bucket); err != nil {
		return nil, fmt.Errorf("queue.nats.bucket: %s: %w", cfg.Bucket, err)
	}
	w.noticeSubject = noticeSubscription(w.stream.CachedInfo().Config.RePublish, cfg.Subject)
	ok = true
	return w, nil
}

// ConsumerName is the durable consumer of a tenant's subject: the
// config's consumer, '-', the tenant; a subject token that is no tenant
// name (CheckTenant) is named by its digest after a '=', which no tenant
// has.
func ConsumerName(consumer, tenant string) string {
	if CheckTenant(tenant) == nil && len(tenant) <= 128 {
		return consumer + "-" + tenant
	}
	return consumer + "=" + digest([]byte(tenant))[:32]
}

// retireShared deletes the consumer named by the config, the one all
// workers of older versions shared, whose filter (every tenant's
// subject) a work-queue stream would not let overlap the tenants'
// consumers. A job it handed out to a worker still running it would be
// handed out again by its tenant's consumer, and run twice: so it is
// paused first (it hands out no more jobs), and deleted once no job it
// handed out is held, which is when none is pending an ack, or when
// a whole ack wait (the consumer's, plus a second) passed without an
// in-progress ack on it: a live worker sends one every third of the
// ack wait for each job it runs. The jobs still pending then were sent
// back, or held by a worker that is gone, and go to the tenants'
// consumers. Held longer than retireWait (or two such ack waits), the
// consumer is resumed, for the older workers to go on, and an error
// returned: the worker tries again later.
func (w *Worker) retireShared(ctx context.Context) error {
	name := w.cfg.Consumer
	cons, err := w.js.Consumer(ctx, w.cfg.Stream, name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("queue.nats.consumer: %s on stream %s: %w", name, w.cfg.Stream, err)
	}
	at := fmt.Sprintf("queue.nats.consumer: %s, the consumer all workers of older versions shared", name)
	// The in-progress acks come on its ack subjects: watched before the
	// pause, so that none sent after it is missed.
	acks, err := w.nc.SubscribeSync(fmt.Sprintf("$JS.ACK.%s.%s.>", w.cfg.Stream, name))
	if err != nil {
		return fmt.Errorf("%s: watching its acks: %w", at, err)
	}
	defer func() { _ = acks.Unsubscribe() }()
	if err := w.nc.FlushTimeout(opTimeout); err != nil {
		return fmt.Errorf("%s: watching its acks: %w", at, err)
	}
	// Paused for a lease renewed while the worker waits: one that dies
	// meanwhile leaves the older workers without jobs no longer.
	paused := time.Now()
	if _, err := w.js.PauseConsumer(ctx, w.cfg.Stream, name, paused.Add(retireLease)); err != nil {
		return fmt.Errorf("%s: pausing it: %w", at, err)
	}
	resume := func() { _, _ = w.js.ResumeConsumer(context.Background(), w.cfg.Stream, name) }
	quiet := cons.CachedInfo().Config.AckWait + time.Second
	limit := max(retireWait, 2*quiet)
	start := time.Now()
	beat := start
	for {
		info, err := cons.Info(ctx)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil // another worker retired it
		}
		if err != nil {
			resume()
			return fmt.Errorf("%s: %w", at, err)
		}
		if info.NumAckPending == 0 || time.Since(beat) >= quiet {
			if err := w.js.DeleteConsumer(ctx, w.cfg.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				resume()
				return fmt.Errorf("%s: deleting it: %w", at, err)
			}
			w.log.Info("queue: the consumer of older workers retired: each tenant's subject has a consumer of its own",
				"consumer", name, "jobs_sent_on", info.NumAckPending)
			return nil
		}
		if time.Since(paused) >= retireLease/3 {
			_, err := w.js.PauseConsumer(ctx, w.cfg.Stream, name, time.Now().Add(retireLease))
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil // another worker retired it
			}
			if err != nil {
				resume()
				return fmt.Errorf("%s: pausing it: %w", at, err)
			}
			paused = time.Now()
		}
		if time.Since(start) >= limit {
			resume()
			return fmt.Errorf("%s, still has %d jobs run by a live worker after %v: stop the older workers (each sends its jobs back as it stops)",
				at, info.NumAckPending, limit)
		}
		msg, err := acks.NextMsg(100 * time.Millisecond)
		switch {
		case err == nil:
			if bytes.HasPrefix(msg.Data, []byte("+WPI")) {
				beat = time.Now()
			}
		case errors.Is(err, nats.ErrTimeout):
		default:
			// Not allowed to watch them (a permission refused): no word
			// of a live worker can be trusted to be missing.
			resume()
			return fmt.Errorf("%s: watching its acks: %w (allow the workers' user to subscribe to $JS.ACK.%s.>)", at, err, w.cfg.Stream)
		}
		if ctx.Err() != nil {
			resume()
			return fmt.Errorf("%s: %w", at, ctx.Err())
		}
	}
}

// Start takes jobs, up to the config's concurrency at once, until Stop.
func (w *Worker) Start() {
	pullCtx, stop := context.WithCancel(context.Background())
	w.runCtx, w.cancel = context.WithCancel(context.Background())
	w.stop = stop
	w.pulling.Add(1)
	go func() {
		defer w.pulling.Done()
		w.schedule(pullCtx)
	}()
	w.log.Info("queue worker started", "stream", w.cfg.Stream, "consumers", w.cfg.Consumer+"-TENANT", "bucket", w.cfg.Bucket,
		"subject", w.cfg.Subject+".*", "concurrency", w.cfg.Concurrency, "server", w.nc.ConnectedUrlRedacted())
}

// Stop stops pulling, lets the runs in flight end for up to grace, then
// cancels them (their jobs go back to the stream) and closes the
// connection once every run has let its job go.
func (w *Worker) Stop(grace time.Duration) {
	w.stop()
	done := make(chan struct{})
	go func() { w.pulling.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		w.log.Warn("queue: grace period over: cancelling runs")
		w.cancel()
		<-done
	}
	w.cancel()
	// Drain flushes the acks and naks the runs sent.
	if err := w.nc.Drain(); err != nil {
		w.nc.Close()
	}
	<-w.closed
	w.log.Info("queue worker stopped")
}

// noticeBuffer is how many notices wait for the scheduler; past it one
// is dropped, and the next free slot looks at the stream instead.
const noticeBuffer = 1024

// NoticeSubject is the subject prefix Provision has the stream republish
// a notice of each job on (its headers only), + "." + the tenant: a
// worker subscribed to it pulls a job as soon as it is stored.
func NoticeSubject(subject string) string { return subject + "-notice" }

// noticeSubscription is the subject to subscribe to for the notices the
// stream's rp republishes of the jobs on subject.*, or "" if it sends
// none for them.
func noticeSubscription(rp *jetstream.RePublish, subject string) string {
	if rp == nil || rp.Destination == "" {
		return ""
	}
	src := rp.Source
	if src == "" {
		src = ">"
	}
	// The source must take every job's subject.
	want := strings.Split(subject+".*", ".")
	toks := strings.Split(src, ".")
	for i, tok := range toks {
		if tok == ">" {
			break
		}
		if i >= len(want) || tok != "*" && tok != want[i] || i == len(toks)-1 && len(toks) != len(want) {
			return ""
		}
	}
	// The destination's mapped tokens ({{wildcard(1)}}) are any token.
	dest := strings.Split(rp.Destination, ".")
	for i, tok := range dest {
		if strings.Contains(tok, "{{") {
			dest[i] = "*"
		}
	}
	return strings.Join(dest, ".")
}

// listen subscribes to the stream's notices of jobs: each names its
// job's subject (header Nats-Subject), whose tenant the scheduler pulls
// from at once. Without them (a stream provisioned without its
// republish) the log says so once, and the worker looks at the stream
// every scanEvery instead.
func (w *Worker) listen() (*nats.Subscription, time.Duration) {
	if w.noticeSubject == "" {
		w.log.Warn("queue: the stream republishes no notice of its jobs: the worker looks at it every 250ms instead "+
			"(add a republish of its subjects' headers, as queue.Provision and docs/queue.md do)",
			"stream", w.cfg.Stream, "republish_destination", NoticeSubject(w.cfg.Subject)+".{{wildcard(1)}}")
		return nil, scanEvery
	}
	sub, err := w.nc.SubscribeSync(w.noticeSubject)
	if err == nil {
		err = w.nc.FlushTimeout(opTimeout)
	}
	if err == nil {
		// A refused subscription is known by the flush's end (the
		// server's error comes before its pong).
		if _, perr := sub.NextMsg(time.Nanosecond); errors.Is(perr, nats.ErrPermissionViolation) {
			err = perr
		}
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		w.log.Warn("queue: the stream's notices of jobs not watched: the worker looks at it every 250ms instead "+
			"(allow the workers' user to subscribe to them)", "subject", w.noticeSubject, "err", err)
		return nil, scanEvery
	}
	// A notice dropped for a slow subscriber: the next free slot looks.
	_ = sub.SetPendingLimits(noticeBuffer, 1<<20)
	prefix := w.cfg.Subject + "."
	go func() {
		for {
			m, err := sub.NextMsg(time.Hour)
			switch {
			case errors.Is(err, nats.ErrTimeout):
				continue
			case errors.Is(err, nats.ErrSlowConsumer):
				w.missed.Store(true)
				continue
			case err != nil:
				return // unsubscribed, or the connection closed
			}
			// The server's header comes after the job's own: a publisher
			// may send a Nats-Subject of its choosing.
			subjects := m.Header.Values(jetstream.SubjectHeader)
			if len(subjects) == 0 {
				continue
			}
			tenant, ok := strings.CutPrefix(subjects[len(subjects)-1], prefix)
			if !ok {
				continue
			}
			select {
			case w.notices <- tenant:
			default:
				w.missed.Store(true)
			}
		}
	}()
	return sub, rescanEvery
}

// notice marks the tenant of a job the stream stored as having jobs; a
// tenant new to the worker has it look at the stream.
func (w *Worker) notice(tenant string) {
	l := w.lanes[tenant]
	if l == nil || l.cons == nil {
		w.missed.Store(true)
		return
	}
	l.jobs, l.noticed, l.retried = true, time.Now(), false
}

// schedule retires the consumer of older workers if there is one, then
// fills the worker's slots until ctx ends: for each free one it
// takes the next tenant, round the tenants with jobs, that its executor
// admits now, and pulls one job of that tenant's consumer. A tenant that
// cannot start a job (its rate, its share) is passed over, its jobs left
// in the stream, where waiting costs them none of their deliveries. The
// tenants with jobs are the ones the stream's notices named, and the
// ones a look at the stream finds: at the first free slot, after a
// notice may have been missed, and every `every` while a slot is free.
func (w *Worker) schedule(ctx context.Context) {
	slots := make(chan struct{}, w.cfg.Concurrency)
	var scanned time.Time
	for {
		err := w.retireShared(ctx)
		if err == nil {
			break
		}
		w.log.Warn("queue: no job taken until the consumer of older workers is retired", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retireAgain):
		}
	}
	sub, every := w.listen()
	if sub != nil {
		defer func() { _ = sub.Unsubscribe() }()
	}
	for {
		select {
		case slots <- struct{}{}:
		case t := <-w.notices:
			w.notice(t)
			continue
		case <-ctx.Done():
			return
		}
		for {
			if time.Since(scanned) >= every || w.missed.Load() && time.Since(scanned) >= noticeRetry {
				w.missed.Store(false)
				w.scan(ctx)
				if w.shared {
					w.shared = false
					if err := w.retireShared(ctx); err != nil {
						w.log.Warn("queue: the consumer of older workers is back: the tenants' consumers wait", "err", err)
					} else {
						w.scan(ctx)
					}
				}
				scanned = time.Now()
			}
			msg, adm, wake := w.take(ctx)
			if msg != nil {
				w.pulling.Add(1)
				go func() {
					defer func() {
						<-slots
						select {
						case w.ended <- struct{}{}:
						default:
						}
						w.pulling.Done()
					}()
					w.handle(msg, adm)
				}()
				break
			}
			wake = min(wake, time.Until(scanned.Add(every)))
			if w.missed.Load() {
				wake = min(wake, time.Until(scanned.Add(noticeRetry)))
			}
			select {
			case <-ctx.Done():
				return
			case <-w.ended:
			case t := <-w.notices:
				w.notice(t)
			case <-time.After(max(wake, time.Millisecond)):
			}
		}
	}
}

// take pulls the job of the next tenant round the lanes that has jobs
// and is admitted; none, it returns how long until one may be.
func (w *Worker) take(ctx context.Context) (jetstream.Msg, Admission, time.Duration) {
	now := time.Now()
	wake := rescanEvery
	n := len(w.order)
	for i := range n {
		l := w.lanes[w.order[(w.next+i)%n]]
		if !l.jobs || l.cons == nil {
			continue
		}
		if d := l.after.Sub(now); d > 0 {
			wake = min(wake, d)
			continue
		}
		// A subject of no tenant has its jobs terminated: nothing runs.
		var adm Admission
		if CheckTenant(l.tenant) == nil {
			var wait time.Duration
			if adm, wait = w.exec.Admit(l.tenant); adm == nil {
				if wait <= 0 {
					wait = retryEvery
				}
				l.after = now.Add(wait)
				wake = min(wake, wait)
				continue
			}
		}
		msg, err := w.fetch(ctx, l)
		if msg == nil {
			if adm != nil {
				adm.Release()
			}
			switch {
			case err != nil:
				// Made again by the next look at the stream: an operator
				// (or another worker, of a stranger's drained subject) may
				// have deleted it.
				w.log.Debug("queue: pull", "tenant", l.tenant, "err", err)
				l.cons, l.jobs = nil, false
				w.missed.Store(true)
			case !l.retried && now.Sub(l.noticed) < 10*noticeRetry:
				// Noticed, and not there yet: the consumer's replica may
				// be a moment behind the stream's leader.
				l.retried, l.after = true, now.Add(noticeRetry)
				wake = min(wake, noticeRetry)
			default:
				l.jobs = false
				l.drained = l.stranger
			}
			continue
		}
		w.next = (w.next + i + 1) % n
		return msg, adm, 0
	}
	w.dropDrained(ctx)
	return nil, nil, wake
}

// dropDrained deletes the consumers of strangers whose jobs are all
// handed out and settled, and forgets their lanes: they are made again
// if jobs come on their subjects.
func (w *Worker) dropDrained(ctx context.Context) {
	keep := w.order[:0]
	for _, t := range w.order {
		l := w.lanes[t]
		if l.drained && time.Now().After(l.dropAt) {
			if w.dropStranger(ctx, l) {
				delete(w.lanes, t)
				w.strangers--
				// A stranger passed over for want of a place may have one.
				w.missed.Store(w.missed.Load() || w.crowded)
				continue
			}
			// A job of it is still held: tried again in a while.
			l.dropAt = time.Now().Add(10 * noticeRetry)
		}
		keep = append(keep, t)
	}
	clear(w.order[len(keep):])
	w.order = keep
	if len(w.order) > 0 {
		w.next %= len(w.order)
	} else {
		w.next = 0
	}
}

// dropStranger deletes a stranger's consumer if no job of it is pending
// or held, and reports whether it did (or there was none).
func (w *Worker) dropStranger(ctx context.Context, l *lane) bool {
	if l.cons == nil {
		return true
	}
	dctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	info, err := l.cons.Info(dctx)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return true
	case err != nil || info.NumPending > 0 || info.NumAckPending > 0:
		return false
	}
	err = w.js.DeleteConsumer(dctx, w.cfg.Stream, info.Name)
	return err == nil || errors.Is(err, jetstream.ErrConsumerNotFound)
}

// fetch pulls one job of the lane's consumer, if it has one to hand out
// now.
func (w *Worker) fetch(ctx context.Context, l *lane) (jetstream.Msg, error) {
	batch, err := l.cons.FetchNoWait(1)
	if err != nil {
		return nil, err
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg != nil {
		return msg, nil
	}
	if err := batch.Error(); err != nil && ctx.Err() == nil {
		return nil, err
	}
	return nil, nil
}

// scan finds the tenants whose subjects hold jobs, and makes the
// consumer of a tenant new to this worker (or updates it to this
// config's ack wait, max ack pending and max deliver). A subject whose
// last token is a wildcard ('*', '>': a publisher may send on it as a
// literal) gets none: its filter would take every tenant's jobs.
func (w *Worker) scan(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	info, err := w.stream.Info(sctx, jetstream.WithSubjectFilter(w.cfg.Subject+".*"))
	if err != nil {
		w.log.Debug("queue: stream info", "err", err)
		return
	}
	w.crowded = false
	// A stranger whose subject is empty now is drained.
	for _, l := range w.lanes {
		if l.stranger && info.State.Subjects[w.cfg.Subject+"."+l.tenant] == 0 {
			l.drained = true
		}
	}
	for subject, n := range info.State.Subjects {
		tenant, ok := strings.CutPrefix(subject, w.cfg.Subject+".")
		if n == 0 || !ok {
			continue
		}
		l := w.lanes[tenant]
		if l == nil {
			if tenant == "*" || tenant == ">" {
				if !w.wildWarned {
					w.wildWarned = true
					w.log.Warn("queue: jobs on a subject of a wildcard token left in the stream (until its max_age): "+
						"a consumer of it would take every tenant's jobs; a publisher may send on its tenant's subject alone",
						"subject", subject, "jobs", n)
				}
				continue
			}
			stranger := CheckTenant(tenant) != nil || !w.exec.Has(tenant)
			if stranger && w.strangers >= maxStrangers {
				// Taken once the strangers' consumers now drain.
				w.crowded = true
				continue
			}
			l = &lane{tenant: tenant, stranger: stranger}
			if stranger {
				w.strangers++
			}
			w.lanes[tenant] = l
			w.order = append(w.order, tenant)
		}
		if l.cons == nil {
			cc := jetstream.ConsumerConfig{
				Durable:       ConsumerName(w.cfg.Consumer, tenant),
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       time.Duration(w.cfg.AckWait),
				MaxAckPending: w.cfg.MaxAckPending,
				MaxDeliver:    w.cfg.MaxDeliver,
				FilterSubject: subject,
			}
			if l.stranger {
				cc.InactiveThreshold = max(strangerIdle, 2*time.Duration(w.cfg.AckWait))
			}
			if l.cons, err = w.js.CreateOrUpdateConsumer(sctx, w.cfg.Stream, cc); err != nil {
				level := slog.LevelDebug
				if !l.warned {
					level, l.warned = slog.LevelWarn, true
				}
				w.log.Log(ctx, level, "queue: consumer of a tenant not made: its jobs wait", "tenant", tenant, "consumer", cc.Durable, "err", err)
				// An older worker started since this one retired their
				// consumer may have made it again, which a work-queue
				// stream lets no tenant's consumer overlap.
				if _, cerr := w.js.Consumer(sctx, w.cfg.Stream, w.cfg.Consumer); cerr == nil {
					w.shared = true
				}
				if l.stranger {
					// Its place goes to the next stranger; it is tried again.
					l.drained = true
				}
				continue
			}
			l.warned = false
		}
		l.jobs = true
	}
}

// handle runs one job with its admission (nil for a subject of no
// tenant) and settles its message: acked once its result is stored,
// terminated when refused (with its refusal stored), sent back when it
// could not run to its end.
func (w *Worker) handle(msg jetstream.Msg, adm Admission) {
	// What the admission took goes back unless the job runs with it.
	ran := false
	defer func() {
		if adm != nil && !ran {
			adm.Release()
		}
	}()
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Warn("queue: message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	tenant := strings.TrimPrefix(msg.Subject(), w.cfg.Subject+".")
	id := msg.Headers().Get(HeaderID)
	log := w.log.With("tenant", tenant, "queue_id", id, "seq", meta.Sequence.Stream, "delivered", meta.NumDelivered)
	var refusal *Refusal
	key := Key(tenant, id)
	switch {
	case CheckTenant(tenant) != nil:
		// The consumer's filter takes one token; a tenant of other
		// characters has no key of its own.
		log.Warn("queue: job on a subject of no tenant: terminated")
		_ = msg.TermWithReason("no tenant")
		return
	case CheckID(id) != nil:
		// The stream sequence keys the refusal: '=' is in no job id.
		key = Key(tenant, fmt.Sprintf("seq=%d", meta.Sequence.Stream))
		refusal = &Refusal{Code: api.CodeInvalidJob, Field: HeaderID,
			Message: fmt.Sprintf("header %s: %v", HeaderID, CheckID(id))}
	}

	beats := w.beat(msg)
	defer beats()
	// A job whose result is stored ran already: a redelivery after its
	// worker died between the store and the ack, or a job sent twice.
	// While the cluster elects a leader the bucket does not answer: the
	// look-up is tried again, not the job sent back, which would spend
	// one of its deliveries.
	sum := digest(msg.Data())
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(w.runCtx, opTimeout)
		var e jetstream.KeyValueEntry
		e, err = w.kv.Get(ctx, key)
		cancel()
		switch {
		case err == nil:
			w.settleDone(msg, key, id, sum, e.Value(), log)
			return
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case try+1 < storeTries && w.runCtx.Err() == nil:
			log.Warn("queue: result bucket not answering yet", "try", try+1, "err", err)
			time.Sleep(storeBackoff * time.Duration(1+try/4))
			continue
		default:
			log.Warn("queue: result bucket unreachable: job sent back", "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		break
	}
	var res *api.Result
	if refusal == nil {
		ran = true
		res, err = adm.Execute(w.runCtx, msg.Data())
		var later *Later
		switch {
		case errors.As(err, &refusal):
		case errors.As(err, &later):
			log.Info("queue: job sent back", "after", later.After, "reason", later.Reason)
			_ = msg.NakWithDelay(later.After)
			return
		case err != nil:
			log.Info("queue: job not run to its end: sent back", "err", err)
			_ = msg.Nak()
			return
		}
	}
	if refusal != nil {
		res = refused(refusal)
	}
	res.ID = id
	data, err := encode(res, w.nc.MaxPayload()-int64(recordSlack))
	if err == nil {
		data = record(data, sum)
	}
	if err != nil {
		log.Error("queue: result not encoded: job sent back", "err", err)
		_ = msg.Nak()
		return
	}
	if !w.store(key, data, log) {
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if w.cfg.ResultSubject != NoResultSubject {
		if err := w.nc.Publish(w.cfg.ResultSubject+"."+key, data); err != nil {
			log.Warn("queue: result not published (it is stored)", "err", err)
		}
	}
	if refusal != nil {
		log.Info("queue: job refused: terminated", "code", refusal.Code, "field", refusal.Field, "detail", refusal.Message)
		_ = msg.TermWithReason(refusal.Code)
		return
	}
	log.Info("queue: job done", "status", res.Status, "wall_ms", res.Usage.WallMS)
	w.ack(msg, log)
}

// settleDone settles a job whose id has a stored result: the same job
// (a redelivery after its worker died between the store and the ack, or
// a job sent twice) is acked without running; another job under the id
// is terminated, the stored result left as it is, and its refusal
// published on the result subject for its submitter.
func (w *Worker) settleDone(msg jetstream.Msg, key, id, sum string, stored []byte, log *slog.Logger) {
	_, first, err := decode(id, stored)
	if err != nil {
		log.Warn("queue: stored result unreadable: acked without running", "err", err)
		w.ack(msg, log)
		return
	}
	cerr := conflict(id, first, sum)
	if cerr == nil {
		log.Info("queue: job already done: acked without running")
		w.ack(msg, log)
		return
	}
	log.Warn("queue: another job under a done job's id: terminated", "code", api.CodeIdempotencyConflict)
	if w.cfg.ResultSubject != NoResultSubject {
		res := refused(&Refusal{Code: api.CodeIdempotencyConflict, Field: HeaderID, Message: cerr.Error()})
		res.ID = id
		if data, err := json.Marshal(res); err == nil {
			if err := w.nc.Publish(w.cfg.ResultSubject+"."+key, record(data, sum)); err != nil {
				log.Warn("queue: refusal not published", "err", err)
			}
		}
	}
	_ = msg.TermWithReason(api.CodeIdempotencyConflict)
}

// store puts the result under key, retrying while the cluster elects a
// leader; a result another worker stored first stays (the job's one
// result). It reports whether a result is stored.
func (w *Worker) store(key string, data []byte, log *slog.Logger) bool {
	for try := range storeTries {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, err := w.kv.Create(ctx, key, data)
		cancel()
		switch {
		case err == nil:
			return true
		case errors.Is(err, jetstream.ErrKeyExists):
			log.Info("queue: a result was stored first by another worker; it stays")
			return true
		}
		log.Warn("queue: result not stored yet", "try", try+1, "err", err)
		time.Sleep(storeBackoff * time.Duration(1+try/4))
	}
	log.Error("queue: result not stored: job sent back")
	return false
}

// ack acks and waits for the server's word; a lost ack only means the job
// comes back, and finds its result.
func (w *Worker) ack(msg jetstream.Msg, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		log.Warn("queue: ack not confirmed; a redelivery will find the result", "err", err)
	}
}

// beat tells the stream the job is still being worked on, every third of
// the ack wait, so that a live worker keeps a job that runs longer than
// the ack wait; a dead one stops beating and the job goes to another.
// The returned func stops it.
func (w *Worker) beat(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	every := time.Duration(w.cfg.AckWait) / 3
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

// refused is the result of a refused job.
func refused(r *Refusal) *api.Result {
	msg := r.Message
	return &api.Result{Status: api.StatusRefused, ExitCode: -1, Logs: []api.LogEntry{},
		Error: &api.ErrorInfo{Code: r.Code, Message: msg}}
}

// encode is the result as JSON within max bytes: what does not fit of
// its output is cut, and marked so in Truncated; only an output cut whole
// that still does not fit costs the result its value, logs and posture.
func encode(res *api.Result, max int64) ([]byte, error) {
	data, err := json.Marshal(res)
	if err != nil || int64(len(data)) <= max-resultSlack {
		return data, err
	}
	cut := *res
	over := int64(len(data)) - (max - resultSlack)
	for _, s := range []struct {
		out    *string
		trunc  *bool
		base64 bool
	}{{&cut.Stderr, &cut.Truncated.Stderr, cut.Encoding.Stderr != ""}, {&cut.Stdout, &cut.Truncated.Stdout, cut.Encoding.Stdout != ""}} {
		if over <= 0 || *s.out == "" {
			continue
		}
		var saved int64
		*s.out, saved = cutOutput(*s.out, s.base64, over)
		*s.trunc = true
		over -= saved
	}
	if over > 0 {
		cut.Value = nil
		cut.Logs = []api.LogEntry{}
		cut.Posture = nil
	}
	data, err = json.Marshal(&cut)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("result of %d bytes over the servers' max_payload of %d even with its output cut", len(data), max)
	}
	return data, nil
}

// cutOutput drops the end of out, a stream in base64 on the wire or text
// (valid UTF-8: job.Assemble sends other bytes in base64), until its JSON
// form is at least over bytes shorter, or out is gone; it returns what is
// kept, the stream's first bytes as written (text cut at a character),
// and by how much the JSON form shrank.
func cutOutput(out string, base64 bool, over int64) (string, int64) {
	if base64 {
		// Each 3 bytes or fewer take 4 characters.
		wire := func(n int) int64 { return 4 * int64((n+2)/3) }
		keep := max(len(out)-int(3*((over+3)/4)), 0)
		for keep > 0 && wire(len(out))-wire(keep) < over {
			keep--
		}
		return out[:keep], wire(len(out)) - wire(keep)
	}
	var saved int64
	end := len(out)
	for end > 0 && saved < over {
		_, size := utf8.DecodeLastRuneInString(out[:end])
		saved += int64(jsonstr.Len(out[end-size:end]) - 2)
		end -= size
	}
	return out[:end], saved
}
