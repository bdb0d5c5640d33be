package server

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/ipc"
)

// Output that is not UTF-8 crosses an event stream as base64 chunks with
// their encoding, and text as itself: every one of the 256 byte values
// comes back as written, however the writes cut it.
func TestOutputStreamCarriesBytes(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	text := []byte("héllo, wörld\n")
	want := append(append(append([]byte{}, text...), all...), text...)
	w := httptest.NewRecorder()
	o := &outputStream{e: newEvents(w), typ: api.EventStdout}
	// Writes of 7 bytes cut "é" and "ö" in two, and the bytes anywhere;
	// each is sent as its linger would send it.
	for p := want; len(p) > 0; p = p[min(7, len(p)):] {
		_, _ = o.Write(p[:min(7, len(p))])
		o.release()
	}
	o.flush()
	var got []byte
	var text64, plain int
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		// On the wire: text, or base64 marked so.
		var wire struct{ Data, Encoding string }
		if err := json.Unmarshal(sc.Bytes(), &wire); err != nil {
			t.Fatal(err)
		}
		if wire.Encoding == api.EncodingBase64 {
			text64++
			if _, err := base64.StdEncoding.DecodeString(wire.Data); err != nil {
				t.Fatalf("event %s: %v", sc.Bytes(), err)
			}
		} else {
			plain++
			if !utf8.ValidString(wire.Data) {
				t.Fatalf("event %s: not UTF-8 and not marked base64", sc.Bytes())
			}
		}
		// Decoded: the bytes as written.
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Data...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the stream carried %q,\nwant %q", got, want)
	}
	if text64 == 0 || plain == 0 {
		t.Errorf("%d base64 and %d text chunks: want both", text64, plain)
	}
}

// countingEmitter keeps the events it is given and signals each.
type countingEmitter struct {
	mu     sync.Mutex
	events []api.Event
	got    chan struct{}
}

func (c *countingEmitter) emit(ev api.Event) {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
	select {
	case c.got <- struct{}{}:
	default:
	}
}

func (c *countingEmitter) data() (n int, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range c.events {
		data = append(data, ev.Data...)
	}
	return len(c.events), data
}

// A guest → daemon attack on the events: output written a byte at a
// time made an event of each byte (~50 bytes of JSON for one of output,
// which an async run holds whole). A stream holds output back, so that
// 256 KiB in single bytes is a handful of chunks; what is held goes out
// by itself after its linger, without a later write; the linger grows
// while the chunks it sends are small; and a log event follows the
// output written before it.
func TestOutputStreamHoldsTinyWrites(t *testing.T) {
	e := &countingEmitter{got: make(chan struct{}, 1)}
	o := &outputStream{e: e, typ: api.EventStdout}
	const total = 256 << 10
	start := time.Now()
	for range total {
		_, _ = o.Write([]byte{1})
	}
	o.flush()
	n, data := e.data()
	// One chunk per outputHold bytes, and one per linger that passed.
	most := total/outputHold + int(time.Since(start)/outputLinger) + 2
	if len(data) != total || n > most {
		t.Fatalf("%d single-byte writes: %d events of %d bytes, want at most %d events of %d bytes", total, n, len(data), most, total)
	}

	// A write and nothing more: its chunk goes out after the linger.
	e = &countingEmitter{got: make(chan struct{}, 1)}
	o = &outputStream{e: e, typ: api.EventStdout}
	_, _ = o.Write([]byte("held\n"))
	select {
	case <-e.got:
	case <-time.After(10 * time.Second):
		t.Fatal("a chunk held back was not sent without a later write")
	}
	if n, data := e.data(); n != 1 || string(data) != "held\n" {
		t.Fatalf("%d events of %q, want 1 of %q", n, data, "held\n")
	}

	// Output trickled a byte at a time, each sent by its linger: the
	// linger doubles up to maxLinger, so that a long run trickling output
	// costs an event a second at most; a chunk of more starts it over.
	e = &countingEmitter{got: make(chan struct{}, 1)}
	o = &outputStream{e: e, typ: api.EventStdout}
	want := outputLinger
	for range 10 {
		_, _ = o.Write([]byte{'.'})
		o.lingered()
		want = min(2*want, maxLinger)
		if o.linger != want {
			t.Fatalf("after a chunk of one byte the linger is %v, want %v", o.linger, want)
		}
	}
	_, _ = o.Write(make([]byte, smallChunk))
	o.lingered()
	if o.linger != outputLinger {
		t.Fatalf("after a chunk of %d bytes the linger is %v, want %v", smallChunk, o.linger, outputLinger)
	}
	// Output after a quiet of maxLinger (a line every few seconds) starts
	// it over too: it is not held back a second each.
	for range 10 {
		_, _ = o.Write([]byte{'.'})
		o.lingered()
	}
	o.mu.Lock()
	o.sent = o.sent.Add(-maxLinger)
	o.mu.Unlock()
	_, _ = o.Write([]byte("line\n"))
	o.mu.Lock()
	got := o.linger
	o.mu.Unlock()
	o.flush()
	if got != outputLinger {
		t.Fatalf("output after a quiet of %v waits %v, want %v", maxLinger, got, outputLinger)
	}

	// A log event comes after the output written before it, on either
	// stream; an incomplete UTF-8 sequence still waits for the rest.
	e = &countingEmitter{got: make(chan struct{}, 8)}
	out, errs := &outputStream{e: e, typ: api.EventStdout}, &outputStream{e: e, typ: api.EventStderr}
	_, _ = out.Write([]byte("before\n"))
	_, _ = errs.Write([]byte("warn\xc3"))
	logAfterOutput(func(l ipc.Log) { e.emit(api.Event{Type: api.EventLog, Log: &api.Log{Message: l.Message}}) }, out, errs)(ipc.Log{Message: "note"})
	_, _ = errs.Write([]byte("\xa9\n"))
	out.flush()
	errs.flush()
	e.mu.Lock()
	defer e.mu.Unlock()
	var seq []string
	for _, ev := range e.events {
		if ev.Type == api.EventLog {
			seq = append(seq, "log:"+ev.Log.Message)
		} else {
			seq = append(seq, ev.Type+":"+ev.Data)
		}
	}
	if want := []string{"stdout:before\n", "stderr:warn", "log:note", "stderr:é\n"}; !slices.Equal(seq, want) {
		t.Fatalf("events %q, want %q", seq, want)
	}
}
