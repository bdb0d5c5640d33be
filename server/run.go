package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
)

// handleRun is POST /v1/runs: decode, resolve against the ceiling, wait for
// a slot, run, answer (at once or as a stream).
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	peer := peerFrom(r.Context())
	log := s.log.With("peer_pid", peer.PID, "peer_uid", peer.UID)
	reject := func(status int, code, msg, field string, retry time.Duration) {
		s.metrics.rejected.WithLabelValues(code).Inc()
		log.Info("run rejected", "code", code, "field", field, "msg", msg)
		writeError(w, status, code, msg, field, retry)
	}
	if s.draining.Load() {
		reject(http.StatusServiceUnavailable, codeDraining, "the daemon is shutting down", "", 5*time.Second)
		return
	}
	tooLarge := func() {
		reject(http.StatusRequestEntityTooLarge, codeTooLarge,
			fmt.Sprintf("job is larger than %d bytes (at most %d bytes of source and %d of input, with room for the rest)",
				job.MaxRequestBytes, job.MaxSourceBytes, job.MaxInputBytes), "", 0)
	}
	if r.ContentLength > job.MaxRequestBytes {
		tooLarge()
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	req, err := job.Decode(http.MaxBytesReader(w, r.Body, job.MaxRequestBytes))
	// The body is read: clear the deadline, or it would cut the run short
	// (the server's background read watches for the client going away).
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		if isTooLarge(err) {
			tooLarge()
			return
		}
		msg, field := job.Refusal(err)
		reject(http.StatusBadRequest, codeInvalid, msg, field, 0)
		return
	}
	st := s.state.Load()
	resolved, err := job.Resolve(req, st.ceil, false)
	if err != nil {
		msg, field := job.Refusal(err)
		reject(http.StatusBadRequest, codeInvalid, msg, field, 0)
		return
	}

	qctx, cancelQueue := context.WithTimeout(r.Context(), time.Duration(st.cfg.QueueTimeout))
	queued := time.Now()
	release, err := s.lim.acquire(qctx)
	cancelQueue()
	switch {
	case errors.Is(err, errQueueFull):
		reject(http.StatusTooManyRequests, codeQueueFull, "every run slot and queue place is taken", "", time.Second)
		return
	case err != nil && r.Context().Err() != nil:
		log.Info("client gone while queued")
		return
	case err != nil:
		reject(http.StatusServiceUnavailable, codeQueueTimeout,
			fmt.Sprintf("no run slot freed within %v", time.Duration(st.cfg.QueueTimeout)), "", 5*time.Second)
		return
	}
	defer release()
	wait := time.Since(queued)

	// A client that goes away cancels its run: r.Context() ends when the
	// connection closes, and at the end of a shutdown's grace period.
	ctx, cancel := context.WithTimeout(runContext(r.Context()), time.Duration(resolved.Limits.Timeout)+runSlack)
	defer cancel()

	var (
		res    *jail.Result
		ev     *events
		stdout *outputStream
		stderr *outputStream
		opt    job.Options
	)
	if wantsStream(r) {
		ev = newEvents(w)
		stdout = &outputStream{e: ev, typ: client.EventStdout}
		stderr = &outputStream{e: ev, typ: client.EventStderr}
		opt = job.Options{Stdout: stdout, Stderr: stderr, OnLog: ev.log}
	}
	res = st.runner.Run(ctx, resolved, opt)
	// The slot and the counters are settled before the answer goes out, so
	// that a client reading /metrics after its result sees its run.
	release()
	s.metrics.runs.WithLabelValues(string(res.Status)).Inc()
	s.metrics.duration.WithLabelValues(string(resolved.Runtime)).Observe(float64(res.Usage.WallMS) / 1000)
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
	log.Info("run answered", "job", res.ID, "status", res.Status, "queued_ms", wait.Milliseconds(),
		"wall_ms", res.Usage.WallMS, "client_gone", r.Context().Err() != nil)
}
