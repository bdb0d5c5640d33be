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
// are held or its linger after the first of them, never a chunk for each
// of the guest's writes: the jail reads the guest's pipe as output comes,
// so a guest writing a byte at a time made an event of each (tens of
// bytes of JSON for one of output), which an async run holds and stores
// whole: the daemon's memory grew by dozens of times the output. The
// linger starts at outputLinger and doubles after
// each chunk it sends under smallChunk, up to maxLinger, so that output
// trickled out a byte at a time over a long run costs an event a second
// at most, not one every outputLinger; a chunk of more starts it over, and
// so does output after a quiet of maxLinger or more (a line every few
// seconds is not held back a second each).
type outputStream struct {
	e       emitter
	typ     string
	mu      sync.Mutex
	pending []byte        // output held back, at most outputHold and one write
	timer   *time.Timer   // sends what is held, linger after it came
	linger  time.Duration // the next wait; 0 is outputLinger
	sent    time.Time     // when the last chunk went
}

// Output is held outputLinger to maxLinger, and outputHold bytes of it go
// out at once; a chunk the linger sent under smallChunk doubles the next.
const (
	outputLinger = 20 * time.Millisecond
	maxLinger    = time.Second
	outputHold   = 32 << 10
	smallChunk   = 512
)

func (o *outputStream) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = append(o.pending, p...)
	switch {
	case len(o.pending) >= outputHold:
		o.send(false)
		o.linger = outputLinger
	case o.timer == nil:
		if time.Since(o.sent) >= maxLinger {
			o.linger = outputLinger
		}
		o.timer = time.AfterFunc(max(o.linger, outputLinger), o.lingered)
	}
	return len(p), nil
}

// lingered is the timer's: it sends what is held, and waits longer next
// time if that was little.
func (o *outputStream) lingered() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.send(false) < smallChunk {
		o.linger = min(2*max(o.linger, outputLinger), maxLinger)
	} else {
		o.linger = outputLinger
	}
}

// release sends what is held but an incomplete UTF-8 sequence at its end,
// which waits for the next write: what a log event calls first so that it
// follows the output written before it.
func (o *outputStream) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.send(false)
}

// send emits what is held as one chunk, all of it if final, else up to
// its last complete UTF-8 sequence, and returns its size; o.mu is held.
func (o *outputStream) send(final bool) int {
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	cut := len(o.pending)
	if !final {
		cut = completeUTF8(o.pending)
	}
	if cut == 0 {
		return 0
	}
	o.e.emit(o.chunk(o.pending[:cut]))
	o.sent = time.Now()
	o.pending = o.pending[:copy(o.pending, o.pending[cut:])]
	return cut
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
