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
//
// It holds output back and sends it as one chunk once outputHold bytes
// are held or outputLinger after the first of them, never a chunk for
// each of the guest's writes: the jail reads the guest's pipe as output
// comes, so a guest writing a byte at a time made an event of each
// (~50 bytes of JSON for one of output), which an async run holds and
// stores whole: 4 MiB written a byte at a time took 46 MB of events and
// ~280 MiB of the daemon's memory. Events are now at most one per
// outputLinger or per outputHold bytes.
type outputStream struct {
	e       emitter
	typ     string
	mu      sync.Mutex
	pending []byte      // output held back, at most outputHold and one write
	timer   *time.Timer // sends what is held, outputLinger after it came
}

// Output is held at most outputLinger, and outputHold bytes of it go out
// at once.
const (
	outputLinger = 20 * time.Millisecond
	outputHold   = 32 << 10
)

func (o *outputStream) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = append(o.pending, p...)
	switch {
	case len(o.pending) >= outputHold:
		o.send(false)
	case o.timer == nil:
		o.timer = time.AfterFunc(outputLinger, o.release)
	}
	return len(p), nil
}

// release sends what is held but an incomplete UTF-8 sequence at its end,
// which waits for the next write: the timer's call, and what a log event
// calls first so that it follows the output written before it.
func (o *outputStream) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.send(false)
}

// send emits what is held as one chunk, all of it if final, else up to
// its last complete UTF-8 sequence; o.mu is held.
func (o *outputStream) send(final bool) {
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	cut := len(o.pending)
	if !final {
		cut = completeUTF8(o.pending)
	}
	if cut == 0 {
		return
	}
	o.e.emit(o.chunk(o.pending[:cut]))
	o.pending = o.pending[:copy(o.pending, o.pending[cut:])]
}

// flush sends all that is held (an incomplete sequence at the very end
// too): at the run's end, before its result.
func (o *outputStream) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.send(true)
}

// logAfterOutput is log, called once the output held back by the run's
// streams has gone: a log event follows the output written before it.
func logAfterOutput(log func(ipc.Log), streams ...*outputStream) func(ipc.Log) {
	return func(l ipc.Log) {
		for _, o := range streams {
			o.release()
		}
		log(l)
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
