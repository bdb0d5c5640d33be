package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLimiterBoundsAndOrder(t *testing.T) {
	l := newLimiter(1, 2)
	ctx := context.Background()
	rel1, err := l.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 2)
	rels := make(chan func(), 2)
	for i := 1; i <= 2; i++ {
		go func() {
			rel, err := l.acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			got <- i
			rels <- rel
		}()
		waitFor(t, func() bool { _, q, _, _ := l.stats(); return q == i })
	}
	if _, err := l.acquire(ctx); !errors.Is(err, errQueueFull) {
		t.Fatalf("fourth acquire: %v, want queue full", err)
	}
	rel1()
	rel1() // a second release is a no-op
	if first := <-got; first != 1 {
		t.Errorf("waiter %d went first, want 1 (arrival order)", first)
	}
	if r, q, _, _ := l.stats(); r != 1 || q != 1 {
		t.Errorf("running %d queued %d, want 1 and 1", r, q)
	}
	(<-rels)()
	<-got
	(<-rels)()
	if r, q, _, _ := l.stats(); r != 0 || q != 0 {
		t.Errorf("after all releases: running %d queued %d", r, q)
	}
}

func TestLimiterCancelledWaiterLeavesQueue(t *testing.T) {
	l := newLimiter(1, 1)
	rel, _ := l.acquire(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire: %v, want deadline exceeded", err)
	}
	if _, q, _, _ := l.stats(); q != 0 {
		t.Errorf("queued %d after the waiter gave up", q)
	}
	rel()
	if r, _, _, _ := l.stats(); r != 0 {
		t.Errorf("running %d after release", r)
	}
}

func TestLimiterResize(t *testing.T) {
	l := newLimiter(1, 4)
	rel, _ := l.acquire(context.Background())
	done := make(chan func())
	go func() {
		r, err := l.acquire(context.Background())
		if err == nil {
			done <- r
		}
	}()
	waitFor(t, func() bool { _, q, _, _ := l.stats(); return q == 1 })
	l.resize(2, 4)
	select {
	case r := <-done:
		r()
	case <-time.After(5 * time.Second):
		t.Fatal("a larger bound did not admit the waiter")
	}
	rel()
}

// waitFor polls cond until it holds, for at most 10 s: the limiter's
// counts and the captured log change with no event a test can wait on.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLimiterAnsweredSlotIsAQueuePlace: a slot whose run has answered
// (only its teardown holds it) lets one run more wait for it, even with
// no queue at all, so that a client's next run after its answer is not
// refused for a slot about to be free; it lets no more than one, and a
// released slot counts for nothing.
func TestLimiterAnsweredSlotIsAQueuePlace(t *testing.T) {
	l := newLimiter(1, 0)
	wait, err := l.reserve(false)
	if err != nil {
		t.Fatal(err)
	}
	first, err := wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.reserve(false); !errors.Is(err, errQueueFull) {
		t.Fatalf("a second run while the first runs: %v, want queue full", err)
	}
	first.answer()
	first.answer() // a second answer is a no-op
	next, err := l.reserve(false)
	if err != nil {
		t.Fatalf("a run after the first answered: %v, want a place", err)
	}
	if _, err := l.reserve(false); !errors.Is(err, errQueueFull) {
		t.Fatalf("a third run: %v, want queue full (one answered slot, one place)", err)
	}
	granted := make(chan *slot, 1)
	go func() {
		s, err := next(context.Background())
		if err != nil {
			t.Error(err)
		}
		granted <- s
	}()
	waitFor(t, func() bool { _, q, _, _ := l.stats(); return q == 1 })
	select {
	case <-granted:
		t.Fatal("the waiting run got the slot before the answered run released it")
	default:
	}
	first.release()
	second := <-granted
	if r, q, _, _ := l.stats(); r != 1 || q != 0 {
		t.Errorf("after the hand-over: running %d queued %d, want 1 and 0", r, q)
	}
	if _, err := l.reserve(false); !errors.Is(err, errQueueFull) {
		t.Fatalf("with the answered slot released: %v, want queue full", err)
	}
	second.release()
	second.answer() // after its release: counts for nothing
	if _, err := l.reserve(false); err != nil {
		t.Fatalf("with every slot free: %v", err)
	}
}

// A slot given back, or bounds grown, tell freed (the queue's worker,
// which tries a tenant its Admit found without a slot again at once); a
// slot a waiter takes at once does not.
func TestLimiterTellsFreed(t *testing.T) {
	freed := make(chan struct{}, 1)
	l := newLimiter(1, 1)
	l.freed = freed
	told := func() bool {
		select {
		case <-freed:
			return true
		default:
			return false
		}
	}
	s := l.try()
	if s == nil || told() {
		t.Fatalf("the first slot: %v, freed told %v", s, told())
	}
	s.release()
	if !told() {
		t.Fatal("a slot given back did not tell freed")
	}
	first := l.try()
	wait, err := l.reserve(false)
	if err != nil {
		t.Fatal(err)
	}
	first.release() // the waiter takes it
	if told() {
		t.Fatal("freed told of a slot a waiter took")
	}
	second, err := wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l.resize(2, 1)
	if !told() {
		t.Fatal("bounds grown did not tell freed")
	}
	second.release()
}
