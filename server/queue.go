package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// Execute runs one job of the queue for the tenant its subject names
// (queue.Executor): decoded and resolved against that tenant's ceiling
// as a socket job is, within its rate (waited for, not refused: a queued
// job has no client to retry it) and a slot of its share and a global
// one (runInSlot). ctx ends when the worker stops, which cuts the run
// short and sends the job back.
func (s *Server) Execute(ctx context.Context, tenantName string, body []byte) (*api.Result, error) {
	st := s.state.Load()
	tn := st.tenantNamed(tenantName)
	if tn == nil {
		return nil, &queue.Refusal{Code: codeForbidden,
			Message: fmt.Sprintf("tenant %q: no such tenant of this pmjail daemon, and its config refuses others (others: %q)", tenantName, st.cfg.Others)}
	}
	log := s.log.With("queue", "nats", "tenant", tn.name)
	req, err := job.Decode(bytes.NewReader(body))
	if err != nil {
		msg, field := job.Refusal(err)
		code := codeInvalid
		if isTooLarge(err) {
			code = codeTooLarge
		}
		return nil, &queue.Refusal{Code: code, Message: msg, Field: field}
	}
	resolved, err := job.Resolve(req, tn.ceil, false)
	if err != nil {
		msg, field := job.Refusal(err)
		return nil, &queue.Refusal{Code: codeInvalid, Message: msg, Field: field}
	}
	if tn.share != nil {
		for {
			wait, ok := tn.share.bucket.take(time.Now())
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(wait):
			}
		}
	}
	res, err := s.runInSlot(ctx, tn, resolved, s.queued(st, tn), nil, nil)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case errors.Is(err, errNoFDs):
		return nil, &queue.Later{After: 5 * time.Second, Reason: err.Error()}
	case err != nil:
		return nil, &queue.Later{After: time.Second, Reason: fmt.Sprintf("no run slot of tenant %s: %v", tn.name, err)}
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("run %s cut short: %w", res.ID, context.Cause(ctx))
	}
	log.Info("queued run done", "job", res.ID, "status", res.Status, "queued_ms", res.QueuedMS, "wall_ms", res.Usage.WallMS)
	return res, nil
}
