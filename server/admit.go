package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// A job's body is read, and held, before the run is admitted: bodies are
// bounded in number (globally and per uid) and must arrive at a minimum
// rate, so that peers who send large bodies slowly, or send and stall,
// cannot hold the daemon's memory for long, whatever the run slots.
const (
	// bodyGrace is the time a body has before the rate counts: a client
	// may be slow to start.
	bodyGrace = time.Second
	// bodyMinRate is the slowest a body may arrive after bodyGrace, in
	// bytes per second: a largest job then takes about ten seconds. The
	// socket is local; any honest client is far faster.
	bodyMinRate = 256 << 10
	// bodySlotWait is how long a request waits for a body slot before it
	// is refused: bodies are read in moments, so a full gate is an attack
	// or a burst that outgrows the daemon.
	bodySlotWait = time.Second
)

// Refusals of bodyGate.take.
var (
	errBodiesFull      = errors.New("every body-read slot is taken")
	errOwnerBodiesFull = errors.New("every body-read slot of the peer's tenant (for a peer of none, of its uid) is taken")
)

// bodyCaps is how many bodies may be read at once, in all and per owner
// (a tenant, or a peer of none: ownerOf): twice the run slots (bodies
// read while others run), within bounds that keep the worst case, each
// at job.MaxRequestBytes, to tens of MiB. The part is an owner's, not a
// uid's: a tenant of many uids would otherwise have a part for each.
func bodyCaps(maxConcurrency int) (total, perOwner int) {
	total = min(max(2*maxConcurrency, 8), 32)
	return total, max(total/4, 2)
}

// bodyGate counts the bodies being read, in all and by owner.
type bodyGate struct {
	total, perOwner int

	mu      sync.Mutex
	n       int
	byOwner map[string]int
	// freed is closed, and replaced, when a slot frees.
	freed chan struct{}
}

func newBodyGate(total, perOwner int) *bodyGate {
	return &bodyGate{total: total, perOwner: perOwner, byOwner: map[string]int{}, freed: make(chan struct{})}
}

// take waits up to bodySlotWait for a slot for owner, and returns its
// release, which may be called more than once.
func (g *bodyGate) take(ctx context.Context, owner string) (release func(), err error) {
	timer := time.NewTimer(bodySlotWait)
	defer timer.Stop()
	for {
		g.mu.Lock()
		switch {
		case g.byOwner[owner] >= g.perOwner:
			err = errOwnerBodiesFull
		case g.n >= g.total:
			err = errBodiesFull
		default:
			g.n++
			g.byOwner[owner]++
			g.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { g.give(owner) }) }, nil
		}
		freed := g.freed
		g.mu.Unlock()
		select {
		case <-freed:
		case <-timer.C:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// resize sets new caps (a reload's max_concurrency); bodies being read
// keep their slots, and waiters look again.
func (g *bodyGate) resize(total, perOwner int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total, g.perOwner = total, perOwner
	close(g.freed)
	g.freed = make(chan struct{})
}

func (g *bodyGate) give(owner string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.byOwner[owner]--; g.byOwner[owner] <= 0 {
		delete(g.byOwner, owner)
	}
	close(g.freed)
	g.freed = make(chan struct{})
}

// pacedBody reads a request body under a read deadline that moves with
// what has arrived: the next bytes are due by bodyGrace plus their
// offset at bodyMinRate, and all of them by bodyReadTimeout.
type pacedBody struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	n     int64
}

// pacedStep is how far past what has arrived the next deadline reaches:
// a read returns what is there, so one step is always within reach.
const pacedStep = 64 << 10

func newPacedBody(r io.Reader, rc *http.ResponseController) *pacedBody {
	return &pacedBody{r: r, rc: rc, start: time.Now()}
}

func (p *pacedBody) Read(b []byte) (int, error) {
	due := min(bodyGrace+time.Duration((p.n+pacedStep)*int64(time.Second)/bodyMinRate), bodyReadTimeout)
	_ = p.rc.SetReadDeadline(p.start.Add(due))
	n, err := p.r.Read(b)
	p.n += int64(n)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Said as the client can act on it: the net error named the
		// daemon's socket and "i/o timeout".
		err = fmt.Errorf("the body stalled: %d bytes came in %s, and a body must come at %d KiB/s or faster after its first %s (%s at most)",
			p.n, time.Since(p.start).Round(100*time.Millisecond), bodyMinRate>>10, bodyGrace, bodyReadTimeout)
	}
	return n, err
}

// refuseBody answers a request that found no body slot (bodyGate.take's
// error): 429 when its owner holds its part, 503 when the daemon is full.
func (s *Server) refuseBody(reject func(status int, code, msg, field string, retry time.Duration), err error) {
	switch {
	case errors.Is(err, errOwnerBodiesFull):
		reject(http.StatusTooManyRequests, codeBusy, err.Error()+" (the daemon reads a few job bodies of one tenant at once)", "", time.Second)
	case errors.Is(err, errBodiesFull):
		reject(http.StatusServiceUnavailable, codeBusy, err.Error(), "", time.Second)
	}
	// Else the client is gone: nobody to answer.
}
