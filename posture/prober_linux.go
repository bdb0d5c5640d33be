package posture

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// probeTimeout bounds one probe of the host. A probe runs on a context of
// its own, so that no caller's deadline or hang-up cuts it short; this is
// its only deadline.
const probeTimeout = 2 * time.Minute

// The delays between probes again after one that could not finish and
// left a layer unproven: the first, and the most it backs off to.
const (
	firstRetry = 5 * time.Second
	maxRetry   = 5 * time.Minute
)

// Prober keeps the host's posture for a daemon's life.
//
// A layer once proven stays proven. A later probe that fails to prove it
// again (cut short, timed out under load, a throwaway child that could not
// start) leaves it applied; the failure is logged and kept as a note. A
// failed probe is no evidence that the kernel lost a feature, and each
// run's own posture is read back from its own process anyway; what a
// failed probe could do is switch a layer off for every later run in mode
// auto, and whoever can make a probe fail must not be able to do that.
//
// A layer never proven is missing, so mode required refuses (fail closed),
// also when the very first probe fails or times out; the Prober then
// probes again, backing off, until a probe finishes, and a later refresh
// may prove it too.
//
// Probes are detached from whoever asked: at most one runs at a time,
// every caller that asks meanwhile waits for that one, and a caller that
// gives up does not stop it.
type Prober struct {
	probe func(context.Context) *Probed
	log   *slog.Logger

	mu sync.Mutex
	// proven is every probe so far, merged; nil before the first ends.
	proven *Probed
	// finished is when the last probe ended.
	finished time.Time
	// flight is the probe running now, nil when none is.
	flight  *flight
	retry   *time.Timer
	backoff time.Duration
	closed  bool
}

// flight is one probe that callers wait for.
type flight struct {
	done   chan struct{}
	result *Probed
}

// NewProber returns a prober whose first Get probes the host; log receives
// a line per probe and the failures it keeps as notes.
func NewProber(opt Options, log *slog.Logger) *Prober {
	return newProber(func(ctx context.Context) *Probed { return Probe(ctx, opt) }, log)
}

func newProber(probe func(context.Context) *Probed, log *slog.Logger) *Prober {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Prober{probe: probe, log: log}
}

// Get returns the host's posture, waiting for the first probe if none has
// ended yet. A caller whose ctx ends first gets a posture with every layer
// missing (fail closed); the probe goes on.
func (pr *Prober) Get(ctx context.Context) *Probed {
	pr.mu.Lock()
	if p := pr.proven; p != nil {
		pr.mu.Unlock()
		return p
	}
	f := pr.startLocked(ctx)
	pr.mu.Unlock()
	select {
	case <-f.done:
		return f.result
	case <-ctx.Done():
		return unprobed(context.Cause(ctx))
	}
}

// Refresh returns the host's posture from a probe that ended after since:
// the one in flight, or a new one. If ctx ends first it returns ctx's
// cause; the probe goes on and its result is kept.
func (pr *Prober) Refresh(ctx context.Context, since time.Time) (*Probed, error) {
	pr.mu.Lock()
	if p := pr.proven; p != nil && !pr.finished.Before(since) {
		pr.mu.Unlock()
		return p, nil
	}
	f := pr.startLocked(ctx)
	pr.mu.Unlock()
	select {
	case <-f.done:
		return f.result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the host's probe: %w", context.Cause(ctx))
	}
}

// Idle returns a channel closed when no probe is running: at once if none
// is, else when the one running now ends.
func (pr *Prober) Idle() <-chan struct{} {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.flight != nil {
		return pr.flight.done
	}
	done := make(chan struct{})
	close(done)
	return done
}

// Close stops the probes again after a failed one; a probe running goes
// on to its end.
func (pr *Prober) Close() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.closed = true
	if pr.retry != nil {
		pr.retry.Stop()
	}
}

// startLocked joins the probe in flight or starts one, on a context that
// keeps ctx's values but not its cancellation.
func (pr *Prober) startLocked(ctx context.Context) *flight {
	if pr.flight != nil {
		return pr.flight
	}
	f := &flight{done: make(chan struct{})}
	pr.flight = f
	go pr.run(context.WithoutCancel(ctx), f)
	return f
}

func (pr *Prober) run(ctx context.Context, f *flight) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	start := time.Now()
	pr.log.Info("posture probe started")
	fresh := pr.probe(ctx)

	pr.mu.Lock()
	merged := merge(pr.proven, fresh)
	pr.proven, pr.finished, pr.flight, f.result = merged, time.Now(), nil, merged
	again := pr.scheduleLocked(fresh.Incomplete != "" && slices.ContainsFunc(merged.Layers, func(l Layer) bool { return l.State == Missing }))
	pr.mu.Unlock()
	close(f.done)

	if fresh.Incomplete != "" {
		pr.log.Warn("posture probe finished", "ms", time.Since(start).Milliseconds(), "incomplete", fresh.Incomplete)
	} else {
		pr.log.Info("posture probe finished", "ms", time.Since(start).Milliseconds())
	}
	for _, n := range merged.Notes {
		pr.log.Warn("posture probe", "note", n)
	}
	if again > 0 {
		pr.log.Warn("posture probe could not finish; probing again", "in", again.String())
	}
}

// scheduleLocked arranges a probe again after one that could not finish
// and left a layer unproven, backing off; it returns the delay, 0 for none.
func (pr *Prober) scheduleLocked(retry bool) time.Duration {
	if pr.retry != nil {
		pr.retry.Stop()
	}
	if !retry || pr.closed {
		pr.backoff = 0
		return 0
	}
	pr.backoff = min(max(2*pr.backoff, firstRetry), maxRetry)
	pr.retry = time.AfterFunc(pr.backoff, func() {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if !pr.closed {
			pr.startLocked(context.Background())
		}
	})
	return pr.backoff
}

// merge folds a fresh probe into what was proven before: the fresh probe's
// facts, except that a layer proven before stays applied when the fresh
// probe did not prove it again (noted, with why).
func merge(proven, fresh *Probed) *Probed {
	out := &Probed{Cgroup: fresh.Cgroup, Host: fresh.Host, At: fresh.At, Incomplete: fresh.Incomplete}
	if fresh.Incomplete != "" {
		out.Notes = append(out.Notes, fmt.Sprintf("the probe at %s did not finish: %s", fresh.At.Format(time.RFC3339), fresh.Incomplete))
	}
	before := map[string]Layer{}
	if proven != nil {
		for _, l := range proven.Layers {
			before[l.Name] = l
		}
	}
	now := map[string]Layer{}
	for _, l := range fresh.Layers {
		now[l.Name] = l
	}
	keptCgroup := false
	for _, name := range Names {
		l, probed := now[name]
		old, had := before[name]
		if had && old.State == Applied && (!probed || l.State != Applied) {
			why := "not probed"
			if probed {
				why = l.Detail
			}
			out.Notes = append(out.Notes, fmt.Sprintf("%s: kept as an earlier probe proved it; the probe at %s did not prove it again: %s",
				name, fresh.At.Format(time.RFC3339), why))
			l, probed = old, true
			keptCgroup = keptCgroup || slices.Contains([]string{CgroupMemory, CgroupPids, CgroupCPU}, name)
		}
		if probed {
			out.Layers = append(out.Layers, l)
		}
	}
	if keptCgroup {
		out.Cgroup = proven.Cgroup
	}
	return out
}

// unprobed is the posture of a host no probe has finished on: nothing
// proven.
func unprobed(cause error) *Probed {
	p := &Probed{At: time.Now().UTC(), Incomplete: fmt.Sprintf("no probe of this host has finished: %v", cause)}
	for _, name := range Names {
		p.Layers = append(p.Layers, Layer{Name: name, State: Missing, Core: isCore(name), Detail: "not proven: " + p.Incomplete})
	}
	p.Notes = []string{p.Incomplete}
	return p
}
