package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/queue"
)

// QueueConfig is the config's "queue" section: where the daemon takes
// jobs besides its socket. Changing it takes a restart.
type QueueConfig struct {
	// NATS pulls jobs from a NATS JetStream work-queue stream (package
	// queue); nil, the daemon takes none.
	NATS *queue.Config `json:"nats"`
}

// StartQueue connects the config's queue worker, if it has one, and
// starts it: jobs of the queue then run beside the socket's, under the
// same tenants, ceilings, slots and rates (Execute). Shutdown stops it.
func (s *Server) StartQueue(ctx context.Context) error {
	cfg := s.state.Load().cfg.Queue.NATS
	if cfg == nil {
		return nil
	}
	w, err := queue.NewWorker(ctx, cfg, s, s.log.With("queue", "nats"))
	if err != nil {
		return err
	}
	s.shutdownMu.Lock()
	defer s.shutdownMu.Unlock()
	s.worker = w
	w.Start()
	return nil
}

// stopQueue stops the queue worker, if one runs, letting its runs end
// for up to grace; the returned channel closes when it has stopped.
func (s *Server) stopQueue(grace time.Duration) <-chan struct{} {
	done := make(chan struct{})
	if s.worker == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		s.worker.Stop(grace)
	}()
	return done
}

// tenantNamed is the tenant of that name, others' included; nil when
// there is none, or others are refused.
func (st *state) tenantNamed(name string) *tenant {
	for _, t := range st.tenants {
		if t.name == name {
			return t
		}
	}
	if name == othersName {
		return st.others
	}
	return nil
}

// unknownTenant is the refusal of a queued job whose subject names a
// tenant the daemon does not have: the names it has, and whether a job
// of no tenant may come as others.
func (st *state) unknownTenant(name string) string {
	names := make([]string, 0, len(st.tenants)+1)
	for _, t := range st.tenants {
		names = append(names, t.name)
	}
	if st.others != nil {
		names = append(names, othersName)
		return fmt.Sprintf("tenant %q: no such tenant of this pmjail daemon (its tenants: %s; a job of no tenant is sent as tenant %s)", name, strings.Join(names, ", "), othersName)
	}
	return fmt.Sprintf("tenant %q: no such tenant of this pmjail daemon (its tenants: %s), and its config refuses others (others: %q)", name, strings.Join(names, ", "), "refuse")
}

// Admit takes at once what a job of the queue for tenantName needs to
// start now (queue.Executor): a token of the tenant's rate, a slot of its
// share and a global one, as free now, ahead of no run that waits for
// them. A tenant that cannot start one has its jobs left in the stream
// (the worker pulls another tenant's), so a queued job neither waits in
// one of the worker's pulls nor is sent back, which would spend one of
// its deliveries. A tenant the daemon does not have is admitted, to be
// refused by Execute.
func (s *Server) Admit(tenantName string) (queue.Admission, time.Duration) {
	st := s.state.Load()
	tn := st.tenantNamed(tenantName)
	if tn == nil {
		return &queuedJob{s: s, st: st, name: tenantName}, 0
	}
	if tn.share != nil {
		if wait, ok := tn.share.bucket.take(time.Now()); !ok {
			return nil, wait
		}
	}
	var g grant
	if tn.share != nil {
		own := tn.share.lim.try()
		if own == nil {
			tn.share.bucket.refund()
			return nil, 0
		}
		g = append(g, own)
	}
	global := s.lim.try()
	if global == nil {
		// Given back untold: telling Freed of it would have the worker
		// try this tenant again at once, and be refused, for ever.
		for _, own := range g {
			own.untry()
		}
		if tn.share != nil {
			tn.share.bucket.refund()
		}
		return nil, 0
	}
	return &queuedJob{s: s, st: st, name: tenantName, tn: tn, slots: append(g, global)}, 0
}

// Freed is told when a slot Admit found taken may be free again
// (queue.Executor): a run's teardown ended, or a reload grew the slots.
func (s *Server) Freed() <-chan struct{} { return s.freed }

// Has reports whether the daemon has the tenant, others' included
// (queue.Executor): the queue gives a subject of a tenant it has not a
// consumer only while its jobs are refused.
func (s *Server) Has(tenantName string) bool {
	return s.state.Load().tenantNamed(tenantName) != nil
}

// queuedJob is a job of the queue admitted by Admit: its tenant (nil: one
// the daemon does not have) and the slots and rate token it took.
type queuedJob struct {
	s     *Server
	st    *state
	name  string
	tn    *tenant
	slots grant
}

// Release gives back the slots and the rate token of a job that does not
// run for the worker's reasons (it stops, the job is not read).
func (q *queuedJob) Release() {
	if q.tn == nil {
		return
	}
	q.slots.release()
	if q.tn.share != nil {
		q.tn.share.bucket.refund()
	}
}

// refused gives back the slots of a job refused for what it says, not
// its rate token, as the socket's refundable does: each refusal still
// costs the worker a pull, a stored record and a publish, so a tenant
// publishing jobs the daemon refuses is held to its rate as one whose
// jobs run.
func (q *queuedJob) refused() {
	if q.tn != nil {
		q.slots.release()
	}
}

// Execute runs the job in the slots Admit took: decoded and resolved
// against its tenant's ceiling as a socket job is (a refusal gives the
// slots back, not the rate token). ctx ends when the worker stops, which
// cuts the run short and sends the job back.
func (q *queuedJob) Execute(ctx context.Context, body []byte) (*api.Result, error) {
	s, st, tn := q.s, q.st, q.tn
	if tn == nil {
		return nil, &queue.Refusal{Code: codeForbidden, Message: st.unknownTenant(q.name)}
	}
	log := s.log.With("queue", "nats", "tenant", tn.name)
	req, err := job.Decode(bytes.NewReader(body))
	if err != nil {
		q.refused()
		msg, field := job.Refusal(err)
		code := codeInvalid
		if isTooLarge(err) {
			code = codeTooLarge
		}
		return nil, &queue.Refusal{Code: code, Message: msg, Field: field}
	}
	resolved, err := job.Resolve(req, tn.ceil, false)
	if err != nil {
		q.refused()
		msg, field := job.Refusal(err)
		return nil, &queue.Refusal{Code: codeInvalid, Message: msg, Field: field}
	}
	taken := func(context.Context) (grant, error) { return q.slots, nil }
	res, answered, err := s.runInSlot(ctx, tn, resolved, taken, nil)
	// The queue's answer is the worker's to publish, not a client's to
	// read: the slot goes with the run's teardown.
	answered()
	re, reloaded := errors.AsType[*reloadRefusal](err)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case reloaded && re.gone:
		return nil, &queue.Refusal{Code: codeForbidden, Message: re.msg}
	case reloaded:
		return nil, &queue.Refusal{Code: codeInvalid, Message: re.msg, Field: re.field}
	case errors.Is(err, errNoFDs):
		return nil, &queue.Later{After: 5 * time.Second, Reason: err.Error()}
	case err != nil:
		return nil, &queue.Later{After: time.Second, Reason: fmt.Sprintf("tenant %s: %v", tn.name, err)}
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("run %s cut short: %w", res.ID, context.Cause(ctx))
	}
	log.Info("queued run done", "job", res.ID, "status", res.Status, "queued_ms", res.QueuedMS, "wall_ms", res.Usage.WallMS)
	return res, nil
}
