package ipc

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// DefaultReplyBudget is how many bytes one run's broker replies may hold in
// the daemon at once (response bodies as read, and their encoded values
// until the reply frames are written), unless one largest reply needs more.
const DefaultReplyBudget = 16 << 20

// maxHeldInFlight is how many bytes one run's request.send calls in
// flight may hold in the daemon of their bodies and URLs (sendCall.held;
// or one largest frame's URL, if that is more): a call past it is
// rate_limited at once.
const maxHeldInFlight = 16 << 20

// urlCopies is how many copies of its URL a call holds while its request
// is under way (the parsed URL, the string the request is made from and
// parsed again, the request line): sixteen calls of a 4 MiB URL to an
// origin that never read held 260 MiB.
const urlCopies = 4

// ErrOverBudget: a reservation larger than the whole budget, which no
// amount of waiting would grant.
var ErrOverBudget = errors.New("over the run's reply budget")

// Budget is one run's share of the daemon's memory. Its calls run at once
// and share it: each reserves, in one step and before it holds anything,
// all it may need, and gives back what it does not keep as soon as it
// knows; a call that would go over waits for the others to give back.
// Since nothing waits while holding part of a reservation, waiting cannot
// deadlock, and the holders finish on their own (a reply frame is taken
// by the guest within the write timeout, or the session fails). A nil
// Budget grants everything.
type Budget struct {
	mu    sync.Mutex
	size  int64
	held  int64
	peak  int64
	freed chan struct{} // closed, and replaced, whenever bytes come back
}

// NewBudget returns a budget of size bytes.
func NewBudget(size int64) *Budget {
	return &Budget{size: size, freed: make(chan struct{})}
}

// replyBudget is the budget for a run under ceil: DefaultReplyBudget, or
// enough for one call's largest body and its largest encoded value.
func replyBudget(ceil Ceiling) *Budget {
	return NewBudget(max(DefaultReplyBudget, ceil.MaxResponseBytes+int64(ceil.MaxFrame)))
}

// Acquire reserves n bytes, waiting while others hold too many for that,
// until ctx ends (its error is returned then).
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	if n > b.size {
		return fmt.Errorf("reserve %d bytes of %d: %w", n, b.size, ErrOverBudget)
	}
	for {
		b.mu.Lock()
		if b.held+n <= b.size {
			b.held += n
			b.peak = max(b.peak, b.held)
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Release gives back n bytes of what was acquired.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = max(b.held-n, 0)
	close(b.freed)
	b.freed = make(chan struct{})
}

// Held is how many bytes are reserved now.
func (b *Budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// Peak is the most ever reserved at once.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}
