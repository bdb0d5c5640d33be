package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/logtext"
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
	// Freed is told when a slot Admit found taken may be free again: a
	// run's slot is given back once its teardown has ended, which may be
	// after its job's result was stored and its message acked.
	Freed() <-chan struct{}
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
	// retired is the record of the consumers of older workers retired
	// (loadRetired): the deliveries they counted.
	retired atomic.Pointer[[]retirement]
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
	if st, err := w.kv.Status(ctx); err == nil {
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo().Config.Discard != jetstream.DiscardOld {
			log.Warn("queue: the result bucket refuses a result once full: one tenant's results may fill it, and every tenant's job is then "+
				"run again at each delivery and never given a result (set its stream's discard policy to old, as queue.Provision and docs/queue.md do)",
				"bucket", cfg.Bucket, "stream", bucketStream(cfg.Bucket))
		}
	}
	warnClaims(ctx, w.js, cfg.Claims, log)
	sc := w.stream.CachedInfo().Config
	w.noticeSubject = noticeSubscription(sc.RePublish, cfg.Subject)
	if sc.MaxMsgsPerSubject <= 0 || !sc.DiscardNewPerSubject {
		log.Warn("queue: the stream bounds no tenant's waiting jobs: one tenant's backlog may fill it, and every tenant's submit is then refused "+
			"(set its max_msgs_per_subject with discard new per subject, as queue.Provision and docs/queue.md do)", "stream", cfg.Stream)
	}
	ok = true
	return w, nil
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
		w.log.Warn("queue: message without metadata", "subject", logtext.Clip(msg.Subject()), "err", err)
		_ = msg.Term()
		return
	}
	tenant := strings.TrimPrefix(msg.Subject(), w.cfg.Subject+".")
	id := msg.Headers().Get(HeaderID)
	// The subject's tenant token and the id are the submitter's text.
	log := w.log.With("tenant", logtext.Clip(tenant), "queue_id", logtext.Clip(id), "seq", meta.Sequence.Stream, "delivered", meta.NumDelivered)
	// A job handed out by the consumer of older workers counts its
	// deliveries there too: one it gave up on is never run again. The
	// record is checked to be of the stream as it is now before a job
	// is terminated by it (stillOfStream).
	over := func() (uint64, bool) {
		older := w.olderDeliveries(meta.Sequence.Stream)
		return older, older > 0 && w.cfg.MaxDeliver > 0 && older+meta.NumDelivered > uint64(w.cfg.MaxDeliver)
	}
	if _, ok := over(); ok {
		ctx, cancel := context.WithTimeout(w.runCtx, opTimeout)
		err := w.stillOfStream(ctx)
		cancel()
		if err != nil {
			log.Warn("queue: stream unreachable: job sent back", "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		if older, ok := over(); ok {
			log.Warn("queue: job handed out max_deliver times in all, with the older workers' consumer: terminated",
				"older_deliveries", older, "max_deliver", w.cfg.MaxDeliver)
			_ = msg.TermWithReason("max_deliver")
			return
		}
	}
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
		// Run again, it would give the same result: it is not sent back.
		log.Error("queue: result not encoded: job terminated", "err", err)
		_ = msg.TermWithReason("result not encoded")
		return
	}
	stored, own := w.store(key, data, log)
	if !stored {
		_ = msg.NakWithDelay(time.Second)
		return
	}
	// A result another worker stored first was published by it: a waiting
	// client reads what is published as what is stored.
	if own && w.cfg.ResultSubject != NoResultSubject {
		if err := w.nc.Publish(w.cfg.ResultSubject+"."+key, data); err != nil {
			log.Warn("queue: result not published (it is stored)", "err", err)
		}
	}
	if refusal != nil {
		log.Info("queue: job refused: terminated", "code", refusal.Code, "field", logtext.Clip(refusal.Field), "detail", logtext.Clip(refusal.Message))
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
// result). It reports whether a result is stored, and whether it is
// this one. A try already made is not cut short (a run that ended keeps
// its result if the store answers), but once the runs are cancelled (a
// stop past its grace) no other is made: the job goes back to the
// stream, where it finds its result if that try stored it, and the stop
// is not held for the retries.
func (w *Worker) store(key string, data []byte, log *slog.Logger) (stored, own bool) {
	for try := range storeTries {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, err := w.kv.Create(ctx, key, data)
		cancel()
		switch {
		case err == nil:
			return true, true
		case errors.Is(err, jetstream.ErrKeyExists):
			log.Info("queue: a result was stored first by another worker; it stays")
			return true, false
		}
		log.Warn("queue: result not stored yet", "try", try+1, "err", err)
		if !w.pause(storeBackoff * time.Duration(1+try/4)) {
			log.Warn("queue: result not stored, the worker is stopping: job sent back")
			return false, false
		}
	}
	log.Error("queue: result not stored: job sent back")
	return false, false
}

// pause waits for d, and reports false at once if the runs are
// cancelled first.
func (w *Worker) pause(d time.Duration) bool { return sleep(w.runCtx, d) == nil }

// sleep waits for d, or until ctx ends (its cause).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
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

// warnClaims says in the worker's log what is amiss with the claims
// bucket, which the workers do not use but the clients do, and which
// a client cannot check: a tenant's user may not ask for a stream's
// info (tenantKV).
func warnClaims(ctx context.Context, js jetstream.JetStream, bucket string, log *slog.Logger) {
	s, err := js.Stream(ctx, bucketStream(bucket))
	if err != nil {
		log.Warn("queue: no claims bucket: clients refuse to submit (make it as queue.Provision and docs/queue.md do)",
			"bucket", bucket, "err", err)
		return
	}
	if s.CachedInfo().Config.AllowRollup {
		log.Warn("queue: the claims bucket allows roll-ups: any tenant's Nats-Rollup: all on its own claim purges every tenant's claims "+
			"(set its stream's allow_rollup_hdrs false, as queue.Provision and docs/queue.md do)",
			"bucket", bucket, "stream", bucketStream(bucket))
	}
}
