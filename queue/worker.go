package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/jsonstr"
)

// Executor runs one job of the queue: the daemon, with the tenant's
// ceiling, share and rate. A job it refuses (not a valid job, a tenant it
// does not know) is a *Refusal; a job it cannot take now is a *Later;
// any other error means the job was not run to its end (the daemon is
// stopping) and goes back to the stream.
type Executor interface {
	Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error)
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
	// fetchWait is how long one pull waits for a job: short enough that a
	// stopping worker stops pulling soon.
	fetchWait = 2 * time.Second
	// storeTries and storeBackoff bound the retries of a result's store
	// while the cluster elects a new leader after a node went away.
	storeTries   = 20
	storeBackoff = 250 * time.Millisecond
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

	nc   *nats.Conn
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	cons jetstream.Consumer

	// stop ends the pulls; cancel the runs in flight.
	stop, cancel context.CancelFunc
	runCtx       context.Context
	// closed closes with the connection.
	closed  chan struct{}
	pulling sync.WaitGroup
}

// NewWorker connects to the config's servers (cfg checked by Check) and
// binds the stream, its consumer and the bucket; it starts nothing.
func NewWorker(ctx context.Context, cfg *Config, exec Executor, log *slog.Logger) (*Worker, error) {
	w := &Worker{cfg: *cfg, exec: exec, log: log, closed: make(chan struct{})}
	var err error
	// The connection's events go to the daemon's log, whose every line is
	// JSON, not to the client's default print.
	w.nc, err = connect(cfg, "pmjail worker",
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("queue: nats", "err", err) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("queue: disconnected from nats", "err", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("queue: reconnected to nats", "server", nc.ConnectedUrlRedacted()) }),
		nats.ClosedHandler(func(*nats.Conn) { close(w.closed) }))
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
	if _, err := w.js.Stream(ctx, cfg.Stream); err != nil {
		return nil, fmt.Errorf("queue.nats.stream: %s: %w", cfg.Stream, err)
	}
	if w.kv, err = w.js.KeyValue(ctx, cfg.Bucket); err != nil {
		return nil, fmt.Errorf("queue.nats.bucket: %s: %w", cfg.Bucket, err)
	}
	cc := jetstream.ConsumerConfig{
		Durable:       cfg.Consumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Duration(cfg.AckWait),
		MaxAckPending: cfg.MaxAckPending,
		MaxDeliver:    cfg.MaxDeliver,
		FilterSubject: cfg.Subject + ".*",
		// Pulls wait on the server, one per free slot of each worker.
		MaxWaiting: 512,
	}
	if w.cons, err = w.js.CreateOrUpdateConsumer(ctx, cfg.Stream, cc); err != nil {
		return nil, fmt.Errorf("queue.nats.consumer: %s on stream %s: %w", cfg.Consumer, cfg.Stream, err)
	}
	ok = true
	return w, nil
}

// Start pulls jobs, one pull per slot of the config's concurrency, until
// Stop.
func (w *Worker) Start() {
	pullCtx, stop := context.WithCancel(context.Background())
	w.runCtx, w.cancel = context.WithCancel(context.Background())
	w.stop = stop
	for range w.cfg.Concurrency {
		w.pulling.Add(1)
		go func() {
			defer w.pulling.Done()
			w.pull(pullCtx)
		}()
	}
	w.log.Info("queue worker started", "stream", w.cfg.Stream, "consumer", w.cfg.Consumer, "bucket", w.cfg.Bucket,
		"subject", w.cfg.Subject+".*", "concurrency", w.cfg.Concurrency, "server", w.nc.ConnectedUrlRedacted())
}

// Stop stops pulling, lets the runs in flight end for up to grace, then
// cancels them (their jobs go back to the stream) and closes the
// connection once every run has let its job go.
func (w *Worker) Stop(grace time.Duration) {
	w.stop()
	// A pull ends with the run it took.
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

// pull takes one job at a time and runs it, until ctx ends.
func (w *Worker) pull(ctx context.Context) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		batch, err := w.cons.Fetch(1, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			backoff = min(2*backoff+100*time.Millisecond, 2*time.Second)
			w.log.Debug("queue: pull", "err", err)
			continue
		}
		backoff = 0
		for msg := range batch.Messages() {
			w.handle(msg)
		}
		cancel()
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			w.log.Debug("queue: pull", "err", err)
			backoff = 100 * time.Millisecond
		}
	}
}

// handle runs one job and settles its message: acked once its result is
// stored, terminated when refused (with its refusal stored), sent back
// when it could not run to its end.
func (w *Worker) handle(msg jetstream.Msg) {
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
		res, err = w.exec.Execute(w.runCtx, tenant, msg.Data())
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
