package jail

import (
	"io"
	"strings"
	"sync"

	"github.com/pmjail/pmjail/internal/offheap"
)

// capture keeps a stream's first limit bytes, optionally passing them on as
// they come, and calls overflow once when the guest writes more.
//
// Past its first, small chunk the output is kept off the Go heap, in
// chunks mapped from the kernel, until text copies it into the one string
// the result holds and unmaps each chunk as soon as it is copied. A
// growing buffer would leave the output's size again (or more) behind as
// garbage, which the collector frees only later and the kernel gets back
// later still: a daemon's peak for a run's output is then twice the output
// or more, where this keeps it at the output and one chunk.
type capture struct {
	limit int64
	live  io.Writer

	mu        sync.Mutex
	chunks    []outChunk // all full but the last
	size      int64
	truncated bool
	joined    *string // text's result, once it is asked for
}

// outChunk is one piece of captured output.
type outChunk struct {
	buf offheap.Buffer
	n   int // bytes filled
}

// The first chunk is on the heap, which is all a typical run's output
// needs; later ones are off it.
const (
	firstChunk  = 64 << 10
	mappedChunk = 1 << 20
)

// drain adds what r gives until a read fails, and returns that error.
func (c *capture) drain(r io.Reader, overflow func()) error {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			c.add(chunk[:n], overflow)
		}
		if err != nil {
			return err
		}
	}
}

func (c *capture) add(p []byte, overflow func()) {
	c.mu.Lock()
	room := c.limit - c.size
	cut := false
	if c.limit > 0 && int64(len(p)) > room {
		room = max(room, 0)
		p = p[:room]
		cut = !c.truncated
		c.truncated = true
	}
	c.store(p)
	c.mu.Unlock()
	if c.live != nil && len(p) > 0 {
		_, _ = c.live.Write(p)
	}
	if cut {
		overflow()
	}
}

// store appends p to the chunks; c.mu is held. After text, the chunks
// are gone and nothing is kept.
func (c *capture) store(p []byte) {
	if c.joined != nil {
		return
	}
	c.size += int64(len(p))
	if len(c.chunks) == 0 {
		c.chunks = []outChunk{{}}
	}
	// The first chunk grows on the heap as output comes, up to its size.
	if first := &c.chunks[0]; len(c.chunks) == 1 && first.n < firstChunk {
		n := min(len(p), firstChunk-first.n)
		first.buf.B = append(first.buf.B, p[:n]...)
		first.n += n
		p = p[n:]
	}
	for len(p) > 0 {
		if last := c.chunks[len(c.chunks)-1]; last.n == len(last.buf.B) {
			c.chunks = append(c.chunks, outChunk{buf: offheap.Alloc(mappedChunk)})
		}
		last := &c.chunks[len(c.chunks)-1]
		n := copy(last.buf.B[last.n:], p)
		last.n += n
		p = p[n:]
	}
}

// text returns what was kept, joined into one string of exactly its size,
// freeing the chunks as it goes. Nothing may be added after it is called.
func (c *capture) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.joined != nil {
		return *c.joined
	}
	var sb strings.Builder
	sb.Grow(int(c.size))
	for i := range c.chunks {
		ch := &c.chunks[i]
		sb.Write(ch.buf.B[:ch.n])
		ch.buf.Free()
	}
	c.chunks = nil
	s := sb.String()
	c.joined = &s
	return s
}
