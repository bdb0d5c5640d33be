package jail

import (
	"io"
	"sync"
)

// capture keeps a stream's first limit bytes, optionally passing them on as
// they come, and calls overflow once when the guest writes more.
type capture struct {
	limit int64
	live  io.Writer

	mu        sync.Mutex
	buf       []byte
	truncated bool
}

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
	room := c.limit - int64(len(c.buf))
	cut := false
	if c.limit > 0 && int64(len(p)) > room {
		if room < 0 {
			room = 0
		}
		p = p[:room]
		cut = !c.truncated
		c.truncated = true
	}
	c.buf = append(c.buf, p...)
	c.mu.Unlock()
	if c.live != nil && len(p) > 0 {
		_, _ = c.live.Write(p)
	}
	if cut {
		overflow()
	}
}

func (c *capture) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf
}
