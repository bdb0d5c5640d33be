package apicheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Transport wraps next so that every exchange is held to the document:
// a request body the document refuses must be refused by the daemon too
// (a 4xx), and every response's status, media type and body must be as
// documented. A stream's events are checked a line at a time as the
// client reads them, the last of them must be the result, and a whole
// body when it has been read or when it is closed. What does not hold is
// passed to fail, naming the method and path; the exchange itself goes on
// unchanged, so the test also sees what the daemon did.
func (d *Doc) Transport(next http.RoundTripper, fail func(error)) http.RoundTripper {
	return &transport{doc: d, next: next, fail: fail}
}

type transport struct {
	doc  *Doc
	next http.RoundTripper
	fail func(error)
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	where := req.Method + " " + req.URL.Path
	var sent *teeBody
	if req.Body != nil && req.Body != http.NoBody {
		// The body is seen as it is sent, not read ahead: a test may send
		// one slowly, or one that never ends.
		req = req.Clone(req.Context())
		sent = &teeBody{rc: req.Body, length: req.ContentLength}
		req.Body = sent
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if sent != nil {
		if body, whole := sent.bytes(); whole {
			rerr := t.doc.Request(req.Method, req.URL.Path, req.Header.Get("Content-Type"), body)
			if rerr != nil && resp.StatusCode < 400 {
				t.fail(fmt.Errorf("%s: the OpenAPI document refuses the request body, but the daemon answered %d: %w\nbody: %s",
					where, resp.StatusCode, rerr, Compact(body)))
			}
		}
	}
	at, err := t.doc.response(req.Method, req.URL.Path, resp.StatusCode)
	if err != nil {
		t.fail(fmt.Errorf("%s: %w", where, err))
		return resp, nil
	}
	ct := resp.Header.Get("Content-Type")
	ptr, mt, err := t.doc.bodySchema(at, fmt.Sprintf("%s %d", where, resp.StatusCode), ct)
	if err != nil {
		t.fail(fmt.Errorf("%s: %w", where, err))
		return resp, nil
	}
	if !isJSON(mt) || req.Method == http.MethodHead {
		return resp, nil
	}
	resp.Body = newCheckedBody(&checkedBody{
		rc: resp.Body, ctx: req.Context(), stream: mt == NDJSON,
		check: func(line int, b []byte) {
			if err := t.doc.Value(ptr, b); err != nil {
				if line > 0 {
					err = fmt.Errorf("event %d: %w", line, err)
				}
				t.fail(fmt.Errorf("%s %d %s: %w\nbody: %s", where, resp.StatusCode, mt, err, Compact(b)))
			}
		},
		last: func(b []byte) {
			var ev struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(b, &ev) != nil || ev.Type != "result" {
				t.fail(fmt.Errorf("%s: the stream ended without the result event; its last line: %s", where, Compact(b)))
			}
		},
	})
	return resp, nil
}

// CloseIdleConnections passes the call on, for http.Client's.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// teeBody keeps what a request body sent, and whether that was all of it.
type teeBody struct {
	rc io.ReadCloser
	// length is the request's Content-Length, or -1: a transport sends
	// that many bytes and need not read on to the end.
	length int64
	mu     sync.Mutex
	buf    bytes.Buffer
	done   bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.buf.Write(p[:n])
	if errors.Is(err, io.EOF) || int64(b.buf.Len()) == b.length {
		b.done = true
	}
	b.mu.Unlock()
	return n, err
}

func (b *teeBody) Close() error { return b.rc.Close() }

func (b *teeBody) bytes() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes()), b.done
}

// checkedBody checks a response body as the client reads it: each line
// of a stream as it completes, a single value at its end. A stream's
// lines are checked on a goroutine of their own, so that the client reads
// as fast as it would unchecked and the daemon sees no slower a reader
// (it gives each event a write deadline); the checks are over when the
// body has been read to its end or closed. A body closed before its end is
// read to its end first, unless the client gave up on it (its context
// ended, or a read failed): then what arrived is all there is to check.
type checkedBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	stream bool
	check  func(line int, b []byte)
	last   func(b []byte)

	buf     bytes.Buffer
	scanned int // bytes at buf's start known to hold no newline
	lines   int
	final   []byte
	done    bool
	broken  bool

	queue   chan line // to the checking goroutine, for a stream
	checked chan struct{}
	// mu orders the queue's sends and its close: a client may close the
	// body while another of its goroutines reads.
	mu     sync.Mutex
	closed bool
}

type line struct {
	n int
	b []byte
}

func newCheckedBody(b *checkedBody) *checkedBody {
	if b.stream {
		b.queue, b.checked = make(chan line, 1024), make(chan struct{})
		go func() {
			defer close(b.checked)
			for l := range b.queue {
				b.check(l.n, l.b)
			}
		}()
	}
	return b
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	if b.stream {
		b.checkLines()
	}
	switch {
	case errors.Is(err, io.EOF):
		b.end()
	case err != nil:
		b.broken = true
	}
	return n, err
}

// checkLines queues every complete line held and drops it. It looks for
// the end of a line only in what arrived since it last looked: a result
// event is one line of up to hundreds of MiB, read in small pieces.
func (b *checkedBody) checkLines() {
	for {
		i := bytes.IndexByte(b.buf.Bytes()[b.scanned:], '\n')
		if i < 0 {
			b.scanned = b.buf.Len()
			return
		}
		i += b.scanned
		b.scanned = 0
		l := bytes.Clone(b.buf.Bytes()[:i])
		b.buf.Next(i + 1)
		b.lines++
		b.send(line{b.lines, l})
		b.final = l
	}
}

// end checks what is left once the body has been read to its end.
func (b *checkedBody) end() {
	if b.done {
		return
	}
	b.done = true
	if !b.stream {
		b.check(0, b.buf.Bytes())
		return
	}
	if b.buf.Len() > 0 { // a last line without its newline
		b.lines++
		b.final = bytes.Clone(b.buf.Bytes())
		b.send(line{b.lines, b.final})
	}
	b.wait()
	b.last(b.final)
}

func (b *checkedBody) send(l line) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.queue <- l
	}
}

// wait ends the checking goroutine once it has checked every line queued.
func (b *checkedBody) wait() {
	if !b.stream {
		return
	}
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.queue)
	}
	b.mu.Unlock()
	<-b.checked
}

func (b *checkedBody) Close() error {
	if !b.done && !b.broken && b.ctx.Err() == nil {
		_, _ = io.Copy(io.Discard, struct{ io.Reader }{b})
	}
	b.wait()
	return b.rc.Close()
}
