package server

import (
	"context"
	"errors"
	"sync"
)

// errQueueFull is the limiter's refusal when every slot and queue place is
// taken.
var errQueueFull = errors.New("queue full")

// limiter admits runs: up to max at once, up to queue more waiting in
// arrival order, and refuses the rest at once so that callers get a 429
// rather than an unbounded wait. Its bounds can change at a reload.
type limiter struct {
	mu      sync.Mutex
	running int
	// closing counts the slots whose runs have answered and are only
	// being torn down (slot.answer): each is a queue place besides
	// queue, so that a run that comes then waits the teardown out, a
	// few milliseconds, rather than being refused for a slot about to
	// be free.
	closing int
	max     int
	queue   int
	waiters []chan struct{}
	// freed, if set, is told (without waiting) that a slot may be free
	// for a try: one was released, or the bounds grew.
	freed chan<- struct{}
}

// slot is a run's slot in a limiter, once granted.
type slot struct {
	l *limiter
	// released and answered are under l.mu.
	released, answered bool
}

// release gives the slot back; later calls do nothing.
func (s *slot) release() { s.giveBack(true) }

// untry gives back a slot try took a moment ago and did not use (the
// queue's Admit refused for want of another), telling freed nothing:
// nothing freed that was taken before the try, and a worker told would
// try the same tenant again at once, for ever.
func (s *slot) untry() { s.giveBack(false) }

// giveBack gives the slot back, to a waiter if one is, and tells freed
// if tell; later calls do nothing.
func (s *slot) giveBack(tell bool) {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	if s.answered {
		l.closing--
	}
	l.running--
	l.grantLocked()
	if tell {
		l.tellFreedLocked()
	}
}

// tellFreedLocked tells freed, if set, that a slot may be free for a try
// (unless a waiter took it).
func (l *limiter) tellFreedLocked() {
	if l.freed == nil || l.running >= l.max {
		return
	}
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// answer says the slot's run has answered: until the slot's release,
// only the run's teardown holds it (see closing).
func (s *slot) answer() {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.released || s.answered {
		return
	}
	s.answered = true
	l.closing++
}

func newLimiter(max, queue int) *limiter {
	return &limiter{max: max, queue: queue}
}

// acquire takes a slot, waiting in the queue until one frees or ctx ends.
// The returned release must be called exactly once.
func (l *limiter) acquire(ctx context.Context) (release func(), err error) {
	wait, err := l.reserve(false)
	if err != nil {
		return nil, err
	}
	s, err := wait(ctx)
	if err != nil {
		return nil, err
	}
	return s.release, nil
}

// reserve takes a slot or a queue place at once, or refuses with
// errQueueFull (unless uncapped: a run that holds a place in its
// tenant's queue, which bounds it, waits here beyond the global one).
// The returned wait then waits for the slot until ctx ends; it must be
// called exactly once.
func (l *limiter) reserve(uncapped bool) (wait func(ctx context.Context) (*slot, error), err error) {
	l.mu.Lock()
	if l.running < l.max && len(l.waiters) == 0 {
		l.running++
		l.mu.Unlock()
		return func(context.Context) (*slot, error) { return &slot{l: l}, nil }, nil
	}
	if !uncapped && len(l.waiters) >= l.queue+l.closing {
		l.mu.Unlock()
		return nil, errQueueFull
	}
	ch := make(chan struct{})
	l.waiters = append(l.waiters, ch)
	l.mu.Unlock()
	return func(ctx context.Context) (*slot, error) { return l.wait(ctx, ch) }, nil
}

// try takes a slot if one is free and no run waits for it; nil if not.
func (l *limiter) try() *slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running < l.max && len(l.waiters) == 0 {
		l.running++
		return &slot{l: l}
	}
	return nil
}

// wait waits for the slot queued as ch.
func (l *limiter) wait(ctx context.Context, ch chan struct{}) (*slot, error) {
	select {
	case <-ch:
		return &slot{l: l}, nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, w := range l.waiters {
			if w == ch {
				l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
				return nil, ctx.Err()
			}
		}
		// Granted while we gave up: hand the slot on.
		l.running--
		l.grantLocked()
		return nil, ctx.Err()
	}
}

// grantLocked gives free slots to the longest waiters.
func (l *limiter) grantLocked() {
	for l.running < l.max && len(l.waiters) > 0 {
		ch := l.waiters[0]
		l.waiters = l.waiters[1:]
		l.running++
		close(ch)
	}
}

// resize sets new bounds; runs already admitted keep their slots.
func (l *limiter) resize(max, queue int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max, l.queue = max, queue
	l.grantLocked()
	l.tellFreedLocked()
}

// stats returns the runs in flight and waiting, and the bounds.
func (l *limiter) stats() (running, queued, max, queue int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running, len(l.waiters), l.max, l.queue
}
