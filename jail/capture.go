package jail

import (
	"io"
	"strings"
	"sync"
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

// outChunk is one piece of captured output; mapped ones are unmapped once
// copied.
type outChunk struct {
	b      []byte // len: what is filled; cap: the chunk
	mapped bool
}

// The first chunk is on the heap, which is all a typical run's output
// needs; later ones are mapped.
const (
	firstChunk  = 64 << 10
	mappedChunk = 1 << 20
)

func (c *capture) drain(r io.Reader, overflow func()) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			c.add(chunk[:n], overflow)
		}
		if err != nil {
			return
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
	for len(p) > 0 {
		if n := len(c.chunks); n == 0 || len(c.chunks[n-1].b) == cap(c.chunks[n-1].b) {
			c.chunks = append(c.chunks, c.newChunk())
		}
		last := &c.chunks[len(c.chunks)-1]
		n := min(len(p), cap(last.b)-len(last.b))
		last.b = append(last.b, p[:n]...)
		p = p[n:]
	}
}

func (c *capture) newChunk() outChunk {
	if len(c.chunks) == 0 {
		return outChunk{b: make([]byte, 0, firstChunk)}
	}
	if b, err := mapChunk(mappedChunk); err == nil {
		return outChunk{b: b[:0], mapped: true}
	}
	// No mapping to be had: the heap still holds the output.
	return outChunk{b: make([]byte, 0, mappedChunk)}
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
	for i, ch := range c.chunks {
		sb.Write(ch.b)
		if ch.mapped {
			unmapChunk(ch.b)
		}
		c.chunks[i] = outChunk{}
	}
	c.chunks = nil
	s := sb.String()
	c.joined = &s
	return s
}
