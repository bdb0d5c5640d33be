package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/runstore"
	"github.com/pmjail/pmjail/internal/strictjson"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
)

// The causes an async run is cancelled for, besides a shutdown's.
var (
	errDeleted       = errors.New("its owner cancelled it (DELETE)")
	errDrainedQueued = errors.New("the daemon shut down before the run had a slot")
	// lostReason is the cause a restarted daemon gives the runs the last
	// one left queued or running.
	lostReason = "the daemon restarted while the run was queued or running"
)

// pruneEvery bounds how long a finished run outlives its retention: the
// store is also pruned at each run's end.
const pruneEvery = time.Minute

// deleteWait bounds how long DELETE waits for the cancelled run's result:
// the jail stops a run at once, so this is a net, not a wait.
const deleteWait = 30 * time.Second

// asyncRuns are the daemon's async runs: the store, which owns every
// run's record, and the runs live in this process.
type asyncRuns struct {
	store *runstore.Store
	log   *slog.Logger

	mu   sync.Mutex
	live map[string]*liveRun
	// running counts the detached runs' goroutines, which Shutdown waits
	// for before it closes the store.
	running sync.WaitGroup

	counts    *prometheus.CounterVec
	stop      chan struct{}
	closeOnce sync.Once
}

// liveRun is an async run not yet ended: the events so far, for the
// streams that follow it, and how to cancel it.
type liveRun struct {
	owner  string
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	buf     bytes.Buffer // the NDJSON events so far
	started bool
	ended   bool
	// stored says the run has ended and the store holds its events and
	// result: buf is emptied, and its followers read on from the store.
	stored  bool
	changed chan struct{} // closed, and replaced, at each change
}

func newLiveRun(owner string, cancel context.CancelCauseFunc) *liveRun {
	return &liveRun{owner: owner, cancel: cancel, changed: make(chan struct{})}
}

// emit records one event, as the stream of a sync run would send it.
func (l *liveRun) emit(ev api.Event) {
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	l.append(func(b *bytes.Buffer) { b.Write(data); b.WriteByte('\n') })
}

func (l *liveRun) log(e ipc.Log) {
	wire := api.Log(e)
	l.emit(api.Event{Type: api.EventLog, Log: &wire})
}

func (l *liveRun) append(f func(*bytes.Buffer)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(&l.buf)
	close(l.changed)
	l.changed = make(chan struct{})
}

// eventChunk bounds the events one follower copies at a time: a run's
// events may be tens of megabytes (a control byte of output is six),
// and each of a peer's many connections may follow it without reading.
const eventChunk = 64 << 10

// since returns at most eventChunk bytes of the events from offset on,
// whether they are the last (the run has ended), whether the rest is to
// be read from the store (stored: none are returned), and a channel
// closed when there is more: at once if there is more already, else at
// the next change.
func (l *liveRun) since(offset int) (b []byte, ended, stored bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stored {
		return nil, true, true, closedChan
	}
	rest := l.buf.Bytes()[offset:]
	if len(rest) > eventChunk {
		return bytes.Clone(rest[:eventChunk]), false, false, closedChan
	}
	return bytes.Clone(rest), l.ended, false, l.changed
}

// closedChan is a channel always ready.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// done returns whether the run has ended, and a channel closed at the
// next change.
func (l *liveRun) done() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended, l.changed
}

// openAsync opens the store of async runs in dir, ending as cancelled
// the runs a previous daemon left unfinished.
func (s *Server) openAsync(dir string, cfg RunsConfig) error {
	lim := runstore.Limits{Retention: time.Duration(cfg.Retention), MaxBytes: int64(cfg.MaxBytes)}
	store, lost, err := runstore.Open(dir, lim, lostReason)
	if errors.Is(err, runstore.ErrDamaged) {
		// A damaged file must not keep the daemon down: its runs are
		// lost, said loudly, and the file kept for a look into it.
		aside, aerr := runstore.SetAside(dir)
		if aerr != nil {
			return fmt.Errorf("%w (%w)", err, aerr)
		}
		s.log.Error("the async run store was damaged: set aside, and a new one started; the runs it held are lost",
			"err", err, "damaged", aside)
		store, lost, err = runstore.Open(dir, lim, lostReason)
	}
	if err != nil {
		return err
	}
	a := &asyncRuns{store: store, log: s.log, live: map[string]*liveRun{}, stop: make(chan struct{})}
	a.counts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pmjail_async_runs_total",
		Help: "Async runs by what happened to them: submitted, done, cancelled, or lost (left unfinished by a daemon that stopped, and cancelled at the next start).",
	}, []string{"event"})
	for _, e := range []string{"submitted", "done", "cancelled", "lost"} {
		a.counts.WithLabelValues(e)
	}
	a.counts.WithLabelValues("lost").Add(float64(lost))
	s.metrics.reg.MustRegister(a.counts,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pmjail_async_runs_stored",
			Help: "Finished async runs kept in the store.",
		}, func() float64 { n, _ := store.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pmjail_async_store_bytes",
			Help: "Bytes of the finished async runs kept (results and events), which runs.max_bytes caps.",
		}, func() float64 { _, b := store.Stats(); return float64(b) }))
	if lost > 0 {
		s.log.Warn("async runs left unfinished by the last daemon ended as cancelled", "count", lost)
	}
	s.log.Info("async runs", "store", dir, "retention", time.Duration(cfg.Retention).String(), "max_bytes", int64(cfg.MaxBytes))
	go a.pruneLoop()
	s.async = a
	return nil
}

// reloadRuns applies a reloaded runs section: its retention and size
// cap at once (the store is pruned to them); its dir at the next start.
func (s *Server) reloadRuns(old, cfg RunsConfig) {
	if old.Dir != cfg.Dir {
		s.log.Warn("config reload: runs.dir changes only at restart")
	}
	if s.async == nil {
		return
	}
	n, err := s.async.store.SetLimits(runstore.Limits{Retention: time.Duration(cfg.Retention), MaxBytes: int64(cfg.MaxBytes)}, time.Now())
	if err != nil {
		s.log.Error("config reload: async run store limits", "err", err)
	} else if n > 0 {
		s.log.Info("pruned async runs to the reloaded limits", "count", n)
	}
}

func (a *asyncRuns) pruneLoop() {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case now := <-t.C:
			a.prune(now)
		}
	}
}

func (a *asyncRuns) prune(now time.Time) {
	if n, err := a.store.Prune(now); err != nil {
		a.log.Error("prune async runs", "err", err)
	} else if n > 0 {
		a.log.Info("pruned async runs", "count", n)
	}
}

// cancelQueued cancels the live runs that have no slot yet: a draining
// daemon starts no more.
func (a *asyncRuns) cancelQueued() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.live {
		l.mu.Lock()
		started := l.started
		l.mu.Unlock()
		if !started {
			l.cancel(errDrainedQueued)
		}
	}
}

// wait waits for the detached runs to end, or ctx.
func (a *asyncRuns) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { a.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops the pruning and closes the store, once the runs are over.
func (a *asyncRuns) close() {
	a.closeOnce.Do(func() {
		close(a.stop)
		if err := a.store.Close(); err != nil {
			a.log.Error("close the async run store", "err", err)
		}
	})
}

// ownerOf is whom an async run belongs to: the tenant, for a peer of a
// tenant the config names, else the peer's uid.
func ownerOf(st *state, tn *tenant, p *Peer) string {
	if tn != nil && tn != st.others {
		return "tenant:" + tn.name
	}
	return "uid:" + strconv.FormatUint(uint64(p.UID), 10)
}

// wantsAsync reports a Prefer: respond-async.
func wantsAsync(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), api.PreferAsync) {
				return true
			}
		}
	}
	return false
}

// runPath is a run's Location.
func runPath(id string) string { return "/" + api.APIVersion + "/runs/" + id }

// admission is a place reserve took: waiting on it gives the run its
// slots or ends with ctx.
type admission = func(context.Context) (grant, error)

// grant is what an admitted run holds: its slots, the global one first,
// then its tenant's.
type grant []*slot

// release gives the slots back; later calls do nothing.
func (g grant) release() {
	for _, s := range g {
		s.release()
	}
}

// answer says the run has answered and only its teardown holds the
// slots: a run that comes meanwhile may wait for them (limiter.closing).
func (g grant) answer() {
	for _, s := range g {
		s.answer()
	}
}

// unreserve gives back a place reserve took, for a run that will not
// be started.
func unreserve(wait admission) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if g, err := wait(ctx); err == nil {
		g.release()
	}
}

// admitAsync charges the tenant's rate and reserves a place for each job,
// all or none: on a refusal it gives back what it took and returns the
// refusal's status, code and message.
func (s *Server) admitAsync(tn *tenant, n int) (waits []admission, status int, code, msg string, retry time.Duration) {
	for range n {
		if tn.share != nil {
			if wait, ok := tn.share.bucket.take(time.Now()); !ok {
				s.giveBack(tn, waits)
				return nil, http.StatusTooManyRequests, codeRateLimited,
					fmt.Sprintf("tenant %s is over its rate of %s", tn.name, tn.share.bucket.rate()), wait
			}
		}
		// No connection is held: the run waits without the sync runs'
		// queue timeout, and beyond the global queue (its place in the
		// tenant's bounds it).
		w, err := s.reserve(tn, true)
		if err != nil {
			if tn.share != nil {
				tn.share.bucket.refund()
			}
			s.giveBack(tn, waits)
			if errors.Is(err, errShareFull) {
				return nil, http.StatusTooManyRequests, codeQueueFull,
					fmt.Sprintf("every run slot and queue place of tenant %s is taken", tn.name), time.Second
			}
			return nil, http.StatusTooManyRequests, codeQueueFull, "every run slot and queue place is taken", time.Second
		}
		waits = append(waits, w)
	}
	return waits, 0, "", "", 0
}

// submitAsync answers a POST /v1/runs with Prefer: respond-async whose job
// is resolved: 202 with the run queued, or the run an Idempotency-Key
// made before.
func (s *Server) submitAsync(w http.ResponseWriter, r *http.Request, log *slog.Logger, reject func(int, string, string, string, time.Duration),
	st *state, tn *tenant, resolved *job.Resolved, sum string) {
	a := s.async
	owner := ownerOf(st, tn, peerFrom(r.Context()))
	key := r.Header.Get(api.IdempotencyKey)
	if len(key) > 255 {
		reject(http.StatusBadRequest, codeInvalid, "the Idempotency-Key header is over 255 bytes", api.IdempotencyKey, 0)
		return
	}
	// Printable ASCII, as a structured-field string: the key is kept in
	// the run's JSON record, where other bytes would not read back the
	// same (and the prune would miss the key).
	if i := strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
		reject(http.StatusBadRequest, codeInvalid, fmt.Sprintf("the Idempotency-Key header holds a byte that is not printable ASCII (at byte %d)", i), api.IdempotencyKey, 0)
		return
	}
	rec := &runstore.Record{ID: job.NewID(), Owner: owner, Key: key, Sum: sum, Status: api.RunQueued, SubmittedAt: time.Now().UTC()}
	answerExisting := func(existing *runstore.Record) {
		// Written as a GET's answer is: an ended run's result from the
		// store, a chunk at a time, each within a deadline. The same
		// submission again costs no rate, and may come on every one of
		// a peer's connections, which may read none of it.
		w.Header().Set("Location", runPath(existing.ID))
		s.answerRun(w, existing, http.StatusAccepted)
	}
	conflict := func(id string) {
		reject(http.StatusUnprocessableEntity, api.CodeIdempotencyConflict,
			fmt.Sprintf("Idempotency-Key %q was given before with another job (run %s); use a new key for a new job", key, id), api.IdempotencyKey, 0)
	}
	if key != "" {
		// The same submission again costs no rate or place.
		existing, err := a.store.Lookup(owner, key)
		switch {
		case err != nil:
			reject(http.StatusServiceUnavailable, codeBusy, "the async run store: "+err.Error(), "", 5*time.Second)
			return
		case existing != nil && existing.Sum != sum:
			conflict(existing.ID)
			return
		case existing != nil:
			log.Info("async run found by its idempotency key", "job", existing.ID)
			answerExisting(existing)
			return
		}
	}
	waits, status, code, msg, retry := s.admitAsync(tn, 1)
	if waits == nil {
		reject(status, code, msg, "", retry)
		return
	}
	existing, err := a.store.Create(rec)
	switch {
	case errors.Is(err, runstore.ErrKeyConflict):
		s.giveBack(tn, waits)
		conflict(existing.ID)
		return
	case err != nil:
		s.giveBack(tn, waits)
		log.Error("async run not stored", "err", err)
		reject(http.StatusServiceUnavailable, codeBusy, "the async run could not be stored: "+err.Error(), "", 5*time.Second)
		return
	case existing != nil:
		s.giveBack(tn, waits)
		log.Info("async run found by its idempotency key", "job", existing.ID)
		answerExisting(existing)
		return
	}
	s.startDetached(rec, tn, resolved, waits[0])
	log.Info("async run submitted", "job", rec.ID)
	run, _ := rec.Run()
	w.Header().Set("Location", runPath(rec.ID))
	writeJSON(w, http.StatusAccepted, run)
}

// giveBack returns the rate and places admitAsync took, for runs not made.
func (s *Server) giveBack(tn *tenant, waits []admission) {
	for _, w := range waits {
		unreserve(w)
		if tn.share != nil {
			tn.share.bucket.refund()
		}
	}
}

// startDetached starts an admitted async run: see runDetached.
func (s *Server) startDetached(rec *runstore.Record, tn *tenant, resolved *job.Resolved, wait admission) {
	a := s.async
	ctx, cancel := context.WithCancelCause(s.runCtx)
	l := newLiveRun(rec.Owner, cancel)
	a.mu.Lock()
	a.live[rec.ID] = l
	a.mu.Unlock()
	a.counts.WithLabelValues("submitted").Inc()
	a.running.Add(1)
	go func() {
		defer a.running.Done()
		defer cancel(nil)
		s.runDetached(ctx, rec.ID, tn, resolved, wait, l)
	}()
}

// runDetached runs the async run id of tenant tn (runInSlot), records
// the events a stream would have sent into l, and stores its end.
func (s *Server) runDetached(ctx context.Context, id string, tn *tenant, resolved *job.Resolved, wait admission, l *liveRun) {
	log := s.log.With("job", id, "tenant", tn.name, "async", true)
	stdout := &outputStream{e: l, typ: api.EventStdout}
	stderr := &outputStream{e: l, typ: api.EventStderr}
	// A run whose slot comes as the daemon drains is not started
	// (runInSlot): cancelQueued may have looked before it had its slot.
	// Running is told from the live run, not written to the store: a run
	// the daemon loses is cancelled whether it was queued or running, and
	// each write is an fsync.
	res, answered, err := s.runInSlot(ctx, tn, resolved, wait, func() job.Options {
		l.mu.Lock()
		l.started = true
		l.mu.Unlock()
		return job.Options{Stdout: stdout, Stderr: stderr, OnLog: logAfterOutput(l.log, stdout, stderr), ID: id}
	})
	// Its answer is the store's, written by the daemon, read by nobody
	// now: the slot goes with the run's teardown.
	answered()
	if err != nil {
		// Never started: its result is the reason alone.
		s.endDetached(id, l, api.RunCancelled, runstore.Cancelled(id, err.Error()), log)
		return
	}
	stdout.flush()
	stderr.flush()
	var out bytes.Buffer
	if err := jail.WriteJSON(&out, res); err != nil {
		log.Error("async result not encoded", "err", err)
	}
	result := bytes.TrimRight(out.Bytes(), "\n")
	state := api.RunDone
	if res.Status == api.StatusCancelled {
		state = api.RunCancelled
	}
	s.endDetached(id, l, state, result, log)
	log.Info("async run ended", "status", res.Status, "queued_ms", res.QueuedMS, "wall_ms", res.Usage.WallMS)
}

// asRunNow is the tenant and job a run of tenant tn, resolved when it
// was submitted, runs as when it starts: as submitted if no reload
// changed its tenant since; else resolved again against the tenant of
// that name now, or refused (*reloadRefusal), saying why. A reload
// applies to the runs that start after it, and a run may have waited
// long (an async one without bound, a sync one for queue_timeout, a
// queue's on its rate): a limit, origin or secret taken away must not
// still apply.
func (s *Server) asRunNow(tn *tenant, resolved *job.Resolved) (*tenant, *job.Resolved, error) {
	now := s.state.Load().tenantNamed(tn.name)
	switch {
	case now == tn:
		return tn, resolved, nil
	case now == nil:
		return nil, nil, &reloadRefusal{gone: true, msg: fmt.Sprintf("a config reload since its submission took its tenant (%s) away", tn.name)}
	}
	again, err := job.Resolve(resolved.Request, now.ceil, false)
	if err != nil {
		msg, field := job.Refusal(err)
		if field != "" && !strings.HasPrefix(msg, field) {
			msg = field + ": " + msg
		}
		return nil, nil, &reloadRefusal{field: field, msg: fmt.Sprintf("the job no longer fits tenant %s's ceiling after a config reload: %s", tn.name, msg)}
	}
	return now, again, nil
}

// reloadRefusal is why a run admitted before a reload may not start
// after it: its tenant is gone, or the job is beyond the tenant's new
// ceiling at field.
type reloadRefusal struct {
	gone  bool
	field string
	msg   string
}

func (e *reloadRefusal) Error() string { return e.msg }

// endDetached stores the run's end, its result event last among its
// events, and only then gives its followers that event: whoever saw the
// result finds the run ended.
func (s *Server) endDetached(id string, l *liveRun, state api.RunState, result json.RawMessage, log *slog.Logger) {
	a := s.async
	// The events are stored without their last, the result event, which
	// the result makes again: a run's output is not kept three times.
	// They are stored as l holds them, not copied (a run's events may be
	// hundreds of megabytes): l stays locked until the store has them,
	// its followers waiting that long.
	l.mu.Lock()
	err := a.store.Finish(id, state, result, l.buf.Bytes())
	l.mu.Unlock()
	if err != nil {
		log.Error("async result not stored", "err", err)
	}
	// A run larger than the store's cap is pruned as it is stored: its
	// followers then have it from l alone.
	stored := err == nil
	if first, err := a.store.ResultChunk(id, 0, 1); stored && (err != nil || len(first) == 0) {
		log.Warn("async run pruned as it ended: it is over runs.max_bytes alone")
		stored = false
	}
	if state == api.RunCancelled {
		a.counts.WithLabelValues("cancelled").Inc()
	} else {
		a.counts.WithLabelValues("done").Inc()
	}
	a.mu.Lock()
	delete(a.live, id)
	a.mu.Unlock()
	l.append(func(b *bytes.Buffer) {
		l.ended = true
		if !stored {
			// Not stored: the followers have it from here alone.
			b.Write(resultEvent(result))
			return
		}
		// Stored: a follower that attached while the run was live
		// reads the rest from the store, a chunk at a time, as any
		// other does. The events are not held for it: a peer's slow
		// followers, one per ended run, would hold them all.
		*b = bytes.Buffer{}
		l.stored = true
	})
}

// handleRunByID is /v1/runs/{id} (GET, DELETE) and /v1/runs/{id}/events
// (GET). A run of another owner is not found: no peer learns which ids
// exist.
func (s *Server) handleRunByID(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/"+api.APIVersion+"/runs/")
	id, sub, _ := strings.Cut(rest, "/")
	if id == "" || (sub != "" && sub != "events") {
		writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+target(r), "", 0)
		return
	}
	method := http.MethodGet
	if sub == "" && r.Method == http.MethodDelete {
		method = http.MethodDelete
	}
	if r.Method != method {
		allow := http.MethodGet
		if sub == "" {
			allow = "GET, DELETE"
		}
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, r.Method+" "+r.URL.Path+": use "+allow, "", 0)
		return
	}
	if s.async == nil {
		s.asyncUnavailable(w)
		return
	}
	if !runID(id) {
		// Not looked up, nor written back: the 404 said the whole path
		// segment, up to the header limit, NUL bytes included.
		writeError(w, http.StatusNotFound, codeNotFound, "no such run: a run's id is 16 lower-case hex digits, as its 202 said", "", 0)
		return
	}
	st := s.state.Load()
	p := peerFrom(r.Context())
	owner := ownerOf(st, st.tenantFor(p), p)
	rec, err := s.async.store.Head(owner, id)
	if errors.Is(err, runstore.ErrNotFound) {
		writeError(w, http.StatusNotFound, codeNotFound, "no run "+id+" of yours (it may be past its retention)", "", 0)
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeBusy, err.Error(), "", 0)
		return
	}
	switch {
	case sub == "events":
		id := rec.ID
		rec = nil // its result is read again at the stream's end, not held
		s.followEvents(w, r, owner, id)
	case method == http.MethodDelete:
		s.cancelAsync(w, r, owner, rec)
	default:
		s.answerRun(w, rec, http.StatusOK)
	}
}

// answerRun answers with the run rec, with status (200, or 202 for a
// submission an Idempotency-Key made before): as it is now, running if
// its live run has started, ended if it ended since rec was read.
func (s *Server) answerRun(w http.ResponseWriter, rec *runstore.Record, status int) {
	if l := s.async.liveOf(rec.Owner, rec.ID); l != nil && rec.Status == api.RunQueued {
		l.mu.Lock()
		if l.started {
			rec.Status = api.RunRunning
		}
		l.mu.Unlock()
	} else if l == nil {
		rec = s.async.fresh(rec.Owner, rec)
	}
	if rec.Status.Ended() {
		s.answerEnded(w, rec, status)
		return
	}
	run, err := rec.Run()
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeBusy, err.Error(), "", 0)
		return
	}
	writeJSON(w, status, run)
}

// answerEnded answers with an ended run, its result written from the
// store a chunk at a time, each within a deadline: a result may be tens
// of megabytes, and a peer may ask on many connections and read none.
func (s *Server) answerEnded(w http.ResponseWriter, rec *runstore.Record, status int) {
	head, err := json.Marshal(api.Run{ID: rec.ID, Status: rec.Status, SubmittedAt: api.Time{Time: rec.SubmittedAt}})
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeBusy, err.Error(), "", 0)
		return
	}
	id := rec.ID
	rec.Result = nil // not held while the answer is written
	first, err := s.async.store.ResultChunk(id, 0, eventChunk)
	if err != nil && !errors.Is(err, runstore.ErrNotFound) {
		writeError(w, http.StatusInternalServerError, codeBusy, err.Error(), "", 0)
		return
	}
	if len(first) == 0 {
		writeError(w, http.StatusNotFound, codeNotFound, "no run "+id+" of yours (it may be past its retention)", "", 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	write := chunkWriter(w)
	// {"id":…,"submitted_at":…} less its brace, then the result.
	if !write(head[:len(head)-1]) || !write([]byte(`,"result":`)) || !s.writeResult(write, id, first) {
		// Cut short: the peer must not take a shorter answer for whole.
		panic(http.ErrAbortHandler)
	}
	write([]byte("}\n"))
}

// chunkWriter writes and flushes each chunk to w within a deadline.
func chunkWriter(w http.ResponseWriter) func([]byte) bool {
	rc := http.NewResponseController(w)
	return func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
}

// writeResult writes run id's stored result from the store, its first
// chunk read already; false if it could not write it all.
func (s *Server) writeResult(write func([]byte) bool, id string, first []byte) bool {
	b := first
	for offset := 0; len(b) > 0; {
		if !write(b) {
			return false
		}
		offset += len(b)
		var err error
		if b, err = s.async.store.ResultChunk(id, offset, eventChunk); err != nil {
			return false
		}
	}
	return true
}

func (s *Server) asyncUnavailable(w http.ResponseWriter) {
	writeError(w, http.StatusServiceUnavailable, api.CodeAsyncUnavailable,
		"this daemon keeps no async runs: its config names no runs.dir, and it has no state directory ($"+stateDirEnv+")", "", 0)
}

// stateDirEnv is the setting the daemon's default store directory comes
// from (runtimes.EnvStateDir, named here for the message alone).
const stateDirEnv = "PMJAIL_STATE_DIR"

func (a *asyncRuns) liveOf(owner, id string) *liveRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.live[id]; l != nil && l.owner == owner {
		return l
	}
	return nil
}

// cancelAsync is DELETE /v1/runs/{id}: it cancels a run not yet ended and
// answers with its end; an ended run is answered as it is.
func (s *Server) cancelAsync(w http.ResponseWriter, r *http.Request, owner string, rec *runstore.Record) {
	if l := s.async.liveOf(owner, rec.ID); l != nil {
		l.cancel(errDeleted)
		ctx, cancel := context.WithTimeout(r.Context(), deleteWait)
		defer cancel()
		for {
			ended, changed := l.done()
			if ended {
				break
			}
			select {
			case <-changed:
				continue
			case <-ctx.Done():
			}
			break
		}
		if again, err := s.async.store.Head(owner, rec.ID); err == nil {
			rec = again
		}
	}
	s.answerRun(w, rec, http.StatusOK)
}

// fresh is rec as the store has it now if rec, not ended, has no live
// run: the run ended since rec was read (its end is stored before it
// leaves the live runs), and its answer is that end, not "queued".
func (a *asyncRuns) fresh(owner string, rec *runstore.Record) *runstore.Record {
	if rec.Status.Ended() {
		return rec
	}
	if again, err := a.store.Head(owner, rec.ID); err == nil {
		return again
	}
	return rec
}

// followEvents is GET /v1/runs/{id}/events: the run's events from its
// start, as a stream would have sent them, following a live run to its
// result.
func (s *Server) followEvents(w http.ResponseWriter, r *http.Request, owner, id string) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", api.NDJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// The stream is open, also for a run still queued, whose first
	// event may be long in coming.
	if !write(nil) {
		return
	}
	offset := 0
	if l := s.async.liveOf(owner, id); l != nil {
		// The request's context ends with the client, and with every run
		// at a shutdown's end of grace: that cancels this run too, whose
		// end comes next, and the stream's last line is always the
		// result. Shutdown waits for this stream a bounded while.
		gone := r.Context().Done()
		for {
			b, ended, stored, changed := l.since(offset)
			if stored {
				break // the rest, from the store
			}
			if len(b) > 0 && !write(b) {
				return
			}
			offset += len(b)
			if ended {
				return
			}
			select {
			case <-changed:
			case <-gone:
				if !errors.Is(context.Cause(r.Context()), errShutdown) {
					return
				}
				gone = nil
			}
		}
	}
	// Ended (perhaps since the lookup, or while followed from offset on):
	// the store has it all. A run the last daemon lost has no events: its
	// result alone. The events are read a chunk at a time, each in its own
	// short read of the store, and the result after them: a follower that
	// stops reading holds no copy of them all (a run's events and result
	// may be tens of megabytes, and a peer has many connections), nor a
	// read of the store open.
	for {
		b, err := s.async.store.EventsChunk(id, offset, eventChunk)
		if err != nil {
			return // pruned since: the stream ends without a result
		}
		if len(b) == 0 {
			break
		}
		if !write(b) {
			return
		}
		offset += len(b)
	}
	first, err := s.async.store.ResultChunk(id, 0, eventChunk)
	if err != nil || len(first) == 0 {
		return // pruned since: the stream ends without a result
	}
	if write([]byte(resultEventHead)) && s.writeResult(write, id, first) {
		write([]byte("}\n"))
	}
}

// resultEvent is the result event line of a stored result.
func resultEvent(result json.RawMessage) []byte {
	return append(append([]byte(resultEventHead), result...), "}\n"...)
}

// batch is POST /v1/batches's body as read: each job is decoded and
// checked as a POST /v1/runs body is.
type batch struct {
	Jobs []json.RawMessage `json:"jobs"`
}

// handleBatch is POST /v1/batches: up to runs.max_batch jobs, each its
// own async run, all admitted or none.
func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	peer, rf := s.openPost(w, r, "batch rejected")
	if rf == nil {
		return
	}
	reject := rf.reject
	if s.async == nil {
		s.asyncUnavailable(w)
		return
	}
	if slices.ContainsFunc(r.Header.Values(api.IdempotencyKey), func(v string) bool { return v != "" }) {
		reject(http.StatusBadRequest, codeInvalid, "a batch takes no Idempotency-Key: submit runs one by one to give each a key", api.IdempotencyKey, 0)
		return
	}
	st := s.state.Load()
	tn := rf.tenant(st, peer)
	if tn == nil {
		return
	}
	log := rf.log
	if !identityBody(w, r, reject) {
		return
	}
	if r.ContentLength > job.MaxRequestBytes {
		reject(http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("a batch is at most %d bytes, all its jobs together", job.MaxRequestBytes), "", 0)
		return
	}
	rc := http.NewResponseController(w)
	bodyDone, err := s.bodies.take(r.Context(), ownerOf(st, tn, peer))
	if err != nil {
		s.refuseBody(reject, err)
		return
	}
	// The slot is held until the jobs are decoded, as a run's is until
	// its job is: decoding costs many times the body.
	defer bodyDone()
	data, err := readBody(newPacedBody(http.MaxBytesReader(w, r.Body, job.MaxRequestBytes), rc))
	if err != nil {
		if isTooLarge(err) {
			reject(http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("a batch is at most %d bytes, all its jobs together", job.MaxRequestBytes), "", 0)
			return
		}
		reject(http.StatusBadRequest, codeInvalid, "read batch: "+err.Error(), "", 0)
		return
	}
	_ = rc.SetReadDeadline(time.Time{})
	maxBatch := st.cfg.Runs.MaxBatch
	overBatch := func(n int) {
		reject(http.StatusBadRequest, codeInvalid, fmt.Sprintf("jobs: %d jobs, over this daemon's batch limit of %d (runs.max_batch)", n, maxBatch), "jobs", 0)
	}
	// Counted before any is kept: a body of the largest size holds
	// millions of tiny jobs ("1,1,..."), whose raw values cost many times
	// the body.
	if n := batchJobs(data); n > maxBatch {
		overBatch(n)
		return
	}
	var b batch
	if err := strictjson.Decode(data, &b); err != nil {
		err = strictjson.Headed(err, "malformed batch JSON")
		field := ""
		if e, ok := errors.AsType[*strictjson.Error](err); ok {
			field = e.Field
		}
		reject(http.StatusBadRequest, codeInvalid, err.Error(), field, 0)
		return
	}
	switch {
	case len(b.Jobs) == 0:
		reject(http.StatusBadRequest, codeInvalid, "jobs: a batch needs at least one job", "jobs", 0)
		return
	case len(b.Jobs) > maxBatch:
		overBatch(len(b.Jobs))
		return
	}
	resolved := make([]*job.Resolved, len(b.Jobs))
	for i, raw := range b.Jobs {
		req, err := job.Decode(bytes.NewReader(raw))
		if err == nil {
			resolved[i], err = job.Resolve(req, tn.ceil, false)
		}
		if err != nil {
			msg, field := job.Refusal(err)
			at := fmt.Sprintf("jobs[%d]", i)
			if field != "" {
				// The message names the field already ("runtime: ..."):
				// the batch's path takes its place, not its head.
				at += "." + field
				msg = strings.TrimPrefix(msg, field+": ")
			}
			reject(http.StatusBadRequest, codeInvalid, at+": "+msg, at, 0)
			return
		}
	}
	bodyDone()
	if msg := s.batchNeverFits(tn, len(b.Jobs)); msg != "" {
		reject(http.StatusBadRequest, codeInvalid, msg, "jobs", 0)
		return
	}
	waits, status, code, msg, retry := s.admitAsync(tn, len(b.Jobs))
	if waits == nil {
		reject(status, code, msg+fmt.Sprintf(" (a batch of %d is admitted whole or not at all)", len(b.Jobs)), "", retry)
		return
	}
	owner := ownerOf(st, tn, peer)
	now := time.Now().UTC()
	out := api.BatchRuns{Runs: make([]api.Run, 0, len(b.Jobs))}
	recs := make([]*runstore.Record, len(b.Jobs))
	for i := range b.Jobs {
		recs[i] = &runstore.Record{ID: job.NewID(), Owner: owner, Status: api.RunQueued, SubmittedAt: now}
	}
	// One write for the whole batch: it is stored whole or not at all,
	// as it is admitted (a batch whose third run failed to store used to
	// start the first two, answered 503 without their ids).
	if err := s.async.store.CreateAll(recs); err != nil {
		s.giveBack(tn, waits)
		log.Error("batch not stored", "err", err)
		reject(http.StatusServiceUnavailable, codeBusy, "the batch could not be stored: "+err.Error(), "", 5*time.Second)
		return
	}
	for i, rec := range recs {
		s.startDetached(rec, tn, resolved[i], waits[i])
		run, _ := rec.Run()
		out.Runs = append(out.Runs, *run)
	}
	log.Info("batch submitted", "runs", len(recs))
	writeJSON(w, http.StatusAccepted, out)
}

// batchJobs counts the jobs of a batch's body without keeping any, or
// returns -1 when the body is not an object whose jobs is an array
// (strictjson.Decode then says why).
func batchJobs(data []byte) int {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return -1
	}
	n := -1
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return -1
		}
		if name.String() != "jobs" || dec.PeekKind() != '[' {
			if err := dec.SkipValue(); err != nil {
				return -1
			}
			continue
		}
		if _, err := dec.ReadToken(); err != nil {
			return -1
		}
		for n = 0; dec.PeekKind() != ']'; n++ {
			if err := dec.SkipValue(); err != nil {
				return -1
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return -1
		}
	}
	return n
}

// batchNeverFits says why a batch of n runs can never be admitted for
// tn, "" if it can: it is admitted whole, so one larger than its share's
// run slots and queue places together, or than its rate's count, would
// be refused 429 on every try, with a Retry-After no wait could meet.
func (s *Server) batchNeverFits(tn *tenant, n int) string {
	lim := s.lim
	if tn.share != nil {
		lim = tn.share.lim
	}
	_, _, slots, queue := lim.stats()
	if room := slots + max(queue, 0); n > room {
		return fmt.Sprintf("jobs: a batch of %d is more than tenant %s can ever hold (%d run slots and %d queue places), and a batch is admitted whole: split it",
			n, tn.name, slots, max(queue, 0))
	}
	if tn.share != nil {
		if r := tn.share.bucket.rate(); r.n > 0 && n > r.n {
			return fmt.Sprintf("jobs: a batch of %d is over tenant %s's rate of %s, which starts at most %d at once, and a batch is admitted whole: split it",
				n, tn.name, r, r.n)
		}
	}
	return ""
}

// readBody reads a body whose size the reader caps.
func readBody(r interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// tenantOf is the peer's tenant, or nil with the refusal's status and
// message.
func (s *Server) tenantOf(st *state, p *Peer) (*tenant, int, string) {
	tn := st.tenantFor(p)
	if tn == nil && p.GroupsErr != nil && st.byGroup() {
		return nil, http.StatusForbidden, fmt.Sprintf("uid %d: the daemon could not read its supplementary groups (%v), and a tenant is matched by group", p.UID, p.GroupsErr)
	}
	if tn == nil {
		return nil, http.StatusForbidden, fmt.Sprintf("uid %d (gid %d) matches no tenant of this pmjail daemon, and its config refuses other peers (others: %q)",
			p.UID, p.GID, st.cfg.Others)
	}
	return tn, 0, ""
}

// asyncDir is where the store lives: the config's runs.dir, else the
// daemon's state directory, else nowhere.
func asyncDir(cfg *Config, stateDir string) string {
	if cfg.Runs.Dir != "" {
		return cfg.Runs.Dir
	}
	return stateDir
}

// runID reports whether id is spelt as job.NewID spells a run's id.
func runID(id string) bool {
	return len(id) == 16 && strings.Trim(id, "0123456789abcdef") == ""
}
