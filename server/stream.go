package server

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/ipc"
)

// eventWriteTimeout bounds each event's write: a client that stops reading
// must not hold the run (or the daemon) forever.
const eventWriteTimeout = 30 * time.Second

// events writes a run as NDJSON events, one flushed line each. The jail
// writes stdout and stderr from separate goroutines and the broker logs
// from a third, so every write goes through one lock.
type events struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	rc  *http.ResponseController
	enc *json.Encoder
	err error // the first write error; later events are dropped
}

func newEvents(w http.ResponseWriter) *events {
	w.Header().Set("Content-Type", api.NDJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	e := &events{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w)}
	_ = e.rc.Flush()
	return e
}

func (e *events) emit(ev api.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
	if e.err = e.enc.Encode(ev); e.err == nil {
		e.err = e.rc.Flush()
	}
}

func (e *events) log(l ipc.Log) {
	wire := api.Log(l)
	e.emit(api.Event{Type: api.EventLog, Log: &wire})
}

// emitter takes a run's events: a response's stream, or an async run's
// record of them.
type emitter interface{ emit(api.Event) }

// outputStream is one output stream as an io.Writer of events. It never
// fails the guest's write: a gone client cancels the run through the
// request context instead.
type outputStream struct {
	e       emitter
	typ     string
	mu      sync.Mutex
	pending []byte // an incomplete UTF-8 sequence held for the next chunk
}

func (o *outputStream) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	buf := append(o.pending, p...)
	cut := completeUTF8(buf)
	o.pending = append([]byte(nil), buf[cut:]...)
	if cut > 0 {
		o.e.emit(o.chunk(buf[:cut]))
	}
	return len(p), nil
}

// flush sends what is held back (an incomplete sequence at the very end).
func (o *outputStream) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pending) > 0 {
		o.e.emit(o.chunk(o.pending))
		o.pending = nil
	}
}

// chunk is an output event for b, marked base64 when it is not UTF-8.
func (o *outputStream) chunk(b []byte) api.Event {
	data := string(b)
	return api.Event{Type: o.typ, Data: data, Encoding: api.OutputEncoding(data)}
}

// completeUTF8 returns the length of b without a trailing incomplete (but
// possibly valid) UTF-8 sequence.
func completeUTF8(b []byte) int {
	n := len(b)
	for i := 1; i <= utf8.UTFMax-1 && i <= n; i++ {
		c := b[n-i]
		if c < 0x80 {
			return n // ASCII: nothing incomplete
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[n-i:]) {
				return n - i
			}
			return n
		}
	}
	return n
}
