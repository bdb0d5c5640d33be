package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/logtext"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
)

// handleRun is POST /v1/runs: find the peer's tenant, decode, resolve
// against its ceiling, charge its rate, wait for a slot of its share and
// a global one, run, answer (at once or as a stream).
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	peer, rf := s.openPost(w, r, "run rejected")
	if rf == nil {
		return
	}
	reject := rf.reject
	st := s.state.Load()
	tn := rf.tenant(st, peer)
	if tn == nil {
		return
	}
	log := rf.log
	if !identityBody(w, r, reject) {
		return
	}
	async := wantsAsync(r)
	if async && s.async == nil {
		s.metrics.rejected.WithLabelValues(api.CodeAsyncUnavailable).Inc()
		s.asyncUnavailable(w)
		return
	}
	if n := len(r.Header.Values(api.IdempotencyKey)); n > 1 {
		// Which one counts would be the reader's choice: a proxy that
		// keyed on the last and pmjail on the first would deduplicate
		// different submissions.
		reject(http.StatusBadRequest, codeInvalid, fmt.Sprintf("the Idempotency-Key header is given %d times: give it once", n), api.IdempotencyKey, 0)
		return
	}
	if !async && r.Header.Get(api.IdempotencyKey) != "" {
		// A sync run is never told apart from a retry of it: a client
		// that sends a key believing it makes a retry safe must learn
		// it does not, not have its job run twice.
		reject(http.StatusBadRequest, codeInvalid, "an Idempotency-Key takes Prefer: respond-async: a sync run is not deduplicated, and a retry of it runs again", api.IdempotencyKey, 0)
		return
	}
	tooLarge := func() {
		reject(http.StatusRequestEntityTooLarge, codeTooLarge,
			fmt.Sprintf("job is larger than %d bytes (at most %d bytes of source or files, %d of input and %d of stdin, with room for the rest)",
				job.MaxRequestBytes, job.MaxSourceBytes, job.MaxInputBytes, api.MaxStdinBytes), "", 0)
	}
	if r.ContentLength > job.MaxRequestBytes {
		tooLarge()
		return
	}
	rc := http.NewResponseController(w)
	bodyDone, err := s.bodies.take(r.Context(), ownerOf(st, tn, peer))
	if err != nil {
		s.refuseBody(reject, err)
		return
	}
	var body io.Reader = newPacedBody(http.MaxBytesReader(w, r.Body, job.MaxRequestBytes), rc)
	sum := sha256.New()
	if async {
		// An Idempotency-Key's job is told apart by its bytes.
		body = io.TeeReader(body, sum)
	}
	req, err := job.Decode(body)
	bodyDone()
	if err != nil {
		// The deadline stays: what is left of a stalled body is not
		// waited for after the answer either.
		if isTooLarge(err) {
			tooLarge()
			return
		}
		msg, field := job.Refusal(err)
		reject(http.StatusBadRequest, codeInvalid, msg, field, 0)
		return
	}
	// The body is read: clear the deadline, or it would cut the run short
	// (the server's background read watches for the client going away).
	_ = rc.SetReadDeadline(time.Time{})
	resolved, err := job.Resolve(req, tn.ceil, false)
	if err != nil {
		msg, field := job.Refusal(err)
		reject(http.StatusBadRequest, codeInvalid, msg, field, 0)
		return
	}
	if async {
		s.submitAsync(w, r, log, reject, st, tn, resolved, hex.EncodeToString(sum.Sum(nil)))
		return
	}
	// The rate counts runs, so a job refused above costs none of it.
	if tn.share != nil {
		if wait, ok := tn.share.bucket.take(time.Now()); !ok {
			reject(http.StatusTooManyRequests, codeRateLimited,
				fmt.Sprintf("tenant %s is over its rate of %s", tn.name, tn.share.bucket.rate()), "", wait)
			return
		}
	}

	// A client that goes away cancels its run, and its wait for a slot:
	// r.Context() ends when the connection closes, and at the end of a
	// shutdown's grace period.
	var (
		ev     *events
		stdout *outputStream
		stderr *outputStream
	)
	res, answered, err := s.runInSlot(runContext(r.Context()), tn, resolved, s.queued(st, tn), func() job.Options {
		if !wantsStream(r) {
			return job.Options{}
		}
		// The stream's 200 goes out once the run has its slot, so that a
		// refusal before can still be an error status.
		ev = newEvents(w)
		stdout = &outputStream{e: ev, typ: api.EventStdout}
		stderr = &outputStream{e: ev, typ: api.EventStderr}
		return job.Options{Stdout: stdout, Stderr: stderr, OnLog: logAfterOutput(ev.log, stdout, stderr)}
	})
	// A run queued across a reload that no longer fits it.
	re, reloaded := errors.AsType[*reloadRefusal](err)
	switch {
	case errors.Is(err, errShareFull):
		reject(http.StatusTooManyRequests, codeQueueFull,
			fmt.Sprintf("every run slot and queue place of tenant %s is taken", tn.name), "", time.Second)
		return
	case errors.Is(err, errQueueFull):
		reject(http.StatusTooManyRequests, codeQueueFull, "every run slot and queue place is taken", "", time.Second)
		return
	case errors.Is(err, errNoFDs):
		reject(http.StatusServiceUnavailable, codeBusy, err.Error(), "", 5*time.Second)
		return
	case reloaded && re.gone:
		reject(http.StatusForbidden, codeForbidden, re.msg, "", 0)
		return
	case reloaded:
		reject(http.StatusBadRequest, codeInvalid, re.msg, re.field, 0)
		return
	case errors.Is(err, errShutdown), errors.Is(err, errDrainedQueued):
		// The client is there: the shutdown ended its wait, not it.
		reject(http.StatusServiceUnavailable, codeDraining, "the daemon shut down before the run had a slot", "", 5*time.Second)
		return
	case err != nil && r.Context().Err() != nil:
		log.Info("client gone while queued")
		return
	case err != nil:
		reject(http.StatusServiceUnavailable, codeQueueTimeout,
			fmt.Sprintf("no run slot freed within %v", time.Duration(st.cfg.QueueTimeout)), "", 5*time.Second)
		return
	}
	// The run's slots are held until its answer is written: an answer
	// holds the run's output whole, and a client that does not read it
	// must not keep it in the daemon beyond its share while its slots
	// run more.
	defer answered()
	if ev != nil {
		stdout.flush()
		stderr.flush()
		ev.result(res)
	} else {
		_ = rc.SetWriteDeadline(time.Now().Add(resultTimeout))
		if err := writeResult(w, res); err != nil {
			log.Info("result not sent", "job", res.ID, "err", err)
		}
	}
	answered()
	// A shutdown ends the request's context too (errShutdown), though its
	// client is there for the result.
	gone := r.Context().Err() != nil && !errors.Is(context.Cause(r.Context()), errShutdown)
	log.Info("run answered", "job", res.ID, "status", res.Status, "queued_ms", res.QueuedMS,
		"wall_ms", res.Usage.WallMS, "client_gone", gone)
}

// runInSlot is the one way the daemon runs a resolved job of tenant tn,
// whatever brought it (a connection, the async API, a queue): it waits
// for its slot (wait, which it always gives back), checks the daemon has
// descriptors to spare, calls start for the run's options (nil: none),
// runs the job under tn's runner and counts the run in the metrics
// before returning its result, and answered, which the caller calls
// once it has answered with the result (more calls do nothing): the
// slot is given back when the run's jail is torn down and the caller
// has answered, so that a result whose reader does not read it is held
// within its tenant's slots, not beside them. ctx cancels the wait and
// the run; its cause is the cancelled result's reason. A run that never
// started returns no result and why: ctx's cause if it ended, else the
// admission's refusal (errShareFull, errQueueFull, its wait's error),
// errDrainedQueued when its slot came as the daemon drains, fdRoom's
// (errNoFDs) or asRunNow's (*reloadRefusal); its rate is refunded when
// refundable says so. Once the run has its slots it runs as asRunNow says: a run
// that waited across a reload, whatever brought it, meets the config in
// force.
func (s *Server) runInSlot(ctx context.Context, tn *tenant, resolved *job.Resolved, wait admission,
	start func() job.Options) (res *jail.Result, answered func(), err error) {
	queued := time.Now()
	slots, err := wait(ctx)
	if err == nil && s.draining.Load() {
		// A draining daemon starts no new work, whatever brought it: a
		// slot freed during the grace period is not taken by a run that
		// was still waiting when the drain began.
		slots.release()
		err = errDrainedQueued
	}
	if err == nil {
		if err = fdRoom(runFDReserve); err != nil {
			slots.release()
			err = fmt.Errorf("the daemon is short of file descriptors: %w", err)
		}
	}
	if err == nil {
		var ntn *tenant
		var nres *job.Resolved
		if ntn, nres, err = s.asRunNow(tn, resolved); err != nil {
			slots.release()
		} else {
			tn, resolved = ntn, nres
		}
	}
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		if tn.share != nil && refundable(err) {
			tn.share.bucket.refund() // it never ran, for the daemon's reasons
		}
		return nil, func() {}, err
	}
	wq := time.Since(queued)
	var opt job.Options
	if start != nil {
		opt = start()
	}
	opt.Owner = tn.name
	// The result goes to the caller as soon as it is complete, which a
	// warm run's is before its jail's teardown (job.Options.Answer); the
	// slot stays taken until the teardown has ended and the caller has
	// answered, and the daemon's shutdown waits for it (teardowns). The
	// counters are settled before the caller answers, so that a client
	// reading /metrics after its result sees its run.
	answer := make(chan *jail.Result, 1)
	settle := func(res *jail.Result) {
		res.QueuedMS = wq.Milliseconds()
		s.metrics.observe(resolved.Runtime, tn.name, res, wq.Seconds())
		answer <- res
	}
	// written is closed once the caller has answered. Only then does the
	// slot wait for the teardown alone: a run the client sends next may
	// wait for it rather than be refused for it.
	written := make(chan struct{})
	var once sync.Once
	answered = func() {
		once.Do(func() {
			slots.answer()
			close(written)
		})
	}
	early := false
	opt.Answer = func(res *jail.Result) {
		early = true
		settle(res)
	}
	s.teardowns.Add(1)
	go func() {
		defer s.teardowns.Done()
		ctx, cancel := context.WithTimeout(ctx, time.Duration(resolved.Limits.Timeout)+runSlack)
		res := tn.runner.Run(ctx, resolved, opt)
		cancel()
		if !early {
			settle(res)
		}
		<-written
		slots.release()
		if early {
			// The run's own refill, at its end, counted its slot as
			// taken, and the next run may have come meanwhile: with the
			// slot free now, the pool may start what it could not then.
			s.warm.Refill()
		}
	}()
	return <-answer, answered, nil
}

// refundable reports whether a run that never started, for err, gets
// its rate's token back: only when the daemon kept it from starting
// (its share or queue full, its queue timeout, a drain or shutdown, a
// reload that refuses it, too few descriptors). A run its own client
// ended while it waited (a sync client gone, an async run DELETEd) is
// not refunded: a tenant whose slots are full would otherwise submit
// and cancel runs at its request rate, each one a stored run and an
// fsync, beyond its rate. The daemon's reasons are named, not the
// client's, so that a cause added later costs the rate until it is
// named here.
func refundable(err error) bool {
	_, reloaded := errors.AsType[*reloadRefusal](err)
	return reloaded || errors.Is(err, errShareFull) || errors.Is(err, errQueueFull) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errDrainedQueued) ||
		errors.Is(err, errShutdown) || errors.Is(err, errNoFDs)
}

// queued is the admission of a run that waits for its slot, as a
// connection's does: for a slot of tn's share and a global one, within
// the config's queue timeout.
func (s *Server) queued(st *state, tn *tenant) admission {
	return func(ctx context.Context) (grant, error) {
		qctx, cancel := context.WithTimeout(ctx, time.Duration(st.cfg.QueueTimeout))
		defer cancel()
		return s.admit(qctx, tn)
	}
}

// refuser answers a POST handler's refusals: counted by code, logged as
// what with log (which gains the tenant once it is known) and written.
type refuser struct {
	s    *Server
	w    http.ResponseWriter
	log  *slog.Logger
	uid  uint32
	what string
}

func (f *refuser) reject(status int, code, msg, field string, retry time.Duration) {
	f.s.metrics.rejected.WithLabelValues(code).Inc()
	// The answer, to the client alone, says them whole.
	if ok, suppressed := f.s.refusals.allow(f.uid, time.Now()); ok {
		f.log.Info(f.what, "code", code, "field", logtext.Clip(field), "detail", logtext.Clip(msg), "suppressed", suppressed)
	}
	writeError(f.w, status, code, msg, field, retry)
}

// tenant is the peer's tenant (tenantOf), whose name its refusals then
// log; nil when the peer has none, refused.
func (f *refuser) tenant(st *state, p *Peer) *tenant {
	tn, status, msg := f.s.tenantOf(st, p)
	if tn == nil {
		f.reject(status, codeForbidden, msg, "", 0)
		return nil
	}
	f.log = f.log.With("tenant", tn.name)
	return tn
}

// openPost starts a POST that submits runs: its peer, and the refuser
// its refusals go through, which logs them as what. A draining daemon
// refuses it at once: the refuser is then nil.
func (s *Server) openPost(w http.ResponseWriter, r *http.Request, what string) (*Peer, *refuser) {
	peer := peerFrom(r.Context())
	rf := &refuser{s: s, w: w, log: s.log.With("peer_pid", peer.PID, "peer_uid", peer.UID), uid: peer.UID, what: what}
	if s.draining.Load() {
		rf.reject(http.StatusServiceUnavailable, codeDraining, "the daemon is shutting down", "", 5*time.Second)
		return peer, nil
	}
	return peer, rf
}

// identityBody refuses, 415 naming the header, a body sent with a
// Content-Encoding other than identity, and reports whether the body
// may be read as it is. The daemon decodes no coding: read as it came,
// a job declared gzip-encoded ran as its bytes said, where a reader
// before pmjail that decodes the coding (a proxy checking jobs) reads
// another job from the same bytes. The Content-Type is not checked:
// the body is JSON whatever it says (curl -d, as the docs use it, says
// application/x-www-form-urlencoded).
func identityBody(w http.ResponseWriter, r *http.Request, reject func(status int, code, msg, field string, retry time.Duration)) bool {
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				w.Header().Set("Accept-Encoding", "identity")
				reject(http.StatusUnsupportedMediaType, codeInvalid,
					fmt.Sprintf("the body is sent with Content-Encoding %q, which this daemon does not decode: send it as it is", logtext.Clip(c)), "Content-Encoding", 0)
				return false
			}
		}
	}
	return true
}

// errShareFull is admit's refusal when the tenant's own slots and queue
// are taken.
var errShareFull = errors.New("tenant share full")

// admit takes a slot of the tenant's share, then a global one (reserve,
// then its wait until ctx ends). The grant's release gives both back and
// may be called more than once.
func (s *Server) admit(ctx context.Context, tn *tenant) (grant, error) {
	wait, err := s.reserve(tn, false)
	if err != nil {
		return nil, err
	}
	return wait(ctx)
}

// reserve takes a place for a run of tn at once, in the tenant's queue
// (errShareFull when it is full) or, for a tenant without a share, the
// global one (errQueueFull). The returned wait waits for a slot of the
// share, then a global one: a tenant waits first behind its own runs, so
// that one tenant's burst fills its own queue before the global one.
// Unless uncapped, a full global queue then refuses (errQueueFull); an
// uncapped run waits beyond it, its place in the tenant's queue bounding
// it. The wait must be called once.
func (s *Server) reserve(tn *tenant, uncapped bool) (admission, error) {
	if tn.share == nil {
		gwait, err := s.lim.reserve(false)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (grant, error) {
			global, err := gwait(ctx)
			if err != nil {
				return nil, err
			}
			return grant{global}, nil
		}, nil
	}
	own, err := tn.share.lim.reserve(false)
	if errors.Is(err, errQueueFull) {
		return nil, errShareFull
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (grant, error) {
		share, err := own(ctx)
		if err != nil {
			return nil, err
		}
		gwait, err := s.lim.reserve(uncapped)
		if err != nil {
			share.release()
			return nil, err
		}
		global, err := gwait(ctx)
		if err != nil {
			share.release()
			return nil, err
		}
		return grant{global, share}, nil
	}, nil
}
