package ipc

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestServeStartInputAndDone(t *testing.T) {
	noLeak(t)
	input := json.RawMessage(`{"name":"Zoë","emoji":"🦀","list":[1,2,3]}`)
	caps := Capabilities{Log: true}
	r := startServe(t, context.Background(), SessionConfig{Input: input, Capabilities: caps, Ceiling: PermissiveCeiling(), Timing: "coarse"})
	if string(r.start.Input) != string(input) || r.start.Options.Timing != "coarse" || string(r.start.Capabilities) != `{"log":true}` {
		t.Fatalf("start frame: %+v", r.start)
	}
	got := r.g.call("input.get", nil)
	wantOK(t, got)
	if string(got.Value) != string(input) {
		t.Fatalf("input.get = %s", got.Value)
	}
	value := `{"greeting":"héllo 世界 🎉","escapes":"a\"b\\c\u2028","n":[1.5,null,true]}`
	r.g.send(map[string]any{"type": "done", "value": json.RawMessage(value)})
	out := r.wait(t, 5*time.Second)
	if !out.Done || out.ProtocolError != nil || out.Calls != 1 {
		t.Fatalf("outcome %+v", out)
	}
	var a, b any
	_ = json.Unmarshal([]byte(value), &a)
	_ = json.Unmarshal(out.Value, &b)
	if ja, jb := mustJSON(a), mustJSON(b); ja != jb {
		t.Fatalf("value changed: %s vs %s", ja, jb)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestServeGuestError(t *testing.T) {
	noLeak(t)
	r := startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling()})
	r.g.send(map[string]any{"type": "error", "error": map[string]string{"name": "TypeError", "message": "x is undefined", "stack": "at main"}})
	out := r.wait(t, 5*time.Second)
	if out.Done || out.Error == nil || out.Error.Name != "TypeError" || out.Error.Stack != "at main" || out.ProtocolError != nil {
		t.Fatalf("outcome %+v", out)
	}
}

// TestResultBoundedHTMLSafe: a done or error frame holds <, > and &
// unescaped, one byte each, where every copy of the result takes six
// (\u003c): within the frame cap, a guest's value of them made the
// daemon build, hold and store six times the cap (a sync run's response
// of 25 MB for a 4 MiB value; eight at once grew the daemon by 1.1 GiB).
// A value or an error over the cap as the result holds it is a
// ResultError; one within it is kept.
func TestResultBoundedHTMLSafe(t *testing.T) {
	const limit = 4096
	ceil := PermissiveCeiling()
	ceil.MaxFrame = limit
	quoted := func(s string) string { return `"` + s + `"` }
	for _, tc := range []struct {
		name, frame string
		ok          bool
	}{
		{"value within", `{"type":"done","value":` + quoted(strings.Repeat("<", (limit-len(`{"type":"done","value":}`))/6-1)) + `}`, true},
		{"value of <", `{"type":"done","value":` + quoted(strings.Repeat("<", limit/2)) + `}`, false},
		{"value of U+2028", `{"type":"done","value":` + quoted(strings.Repeat("\u2028", limit/4)) + `}`, false},
		{"error message of &", `{"type":"error","error":{"name":"E","message":` + quoted(strings.Repeat("&", limit/2)) + `}}`, false},
		{"error cause's value of >", `{"type":"error","error":{"name":"E","message":"m","cause":{"name":"C","message":"","value":` + quoted(strings.Repeat(">", limit/2)) + `}}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			r := startServe(t, context.Background(), SessionConfig{Ceiling: ceil})
			if _, err := r.g.conn.Write(frameBytes(tc.frame)); err != nil {
				t.Fatal(err)
			}
			out := r.wait(t, 5*time.Second)
			if out.ProtocolError != nil {
				t.Fatalf("protocol error %v", out.ProtocolError)
			}
			held := len(mustJSON(struct {
				V json.RawMessage `json:"v,omitempty"`
				E *GuestError     `json:"e,omitempty"`
			}{out.Value, out.Error}))
			if tc.ok {
				if !out.Done || out.Error != nil {
					t.Fatalf("a value within the cap as JSON: done %v, error %+v", out.Done, out.Error)
				}
			} else if out.Error == nil || out.Error.Name != "ResultError" || !strings.Contains(out.Error.Message, "bytes as JSON, over the") || out.Value != nil {
				t.Errorf("a frame of %d bytes, %d as the result holds it: done %v, value of %d bytes; want a ResultError", len(tc.frame), held, out.Done, len(out.Value))
			}
			if held > limit {
				t.Errorf("the result holds %d bytes of it, over the %d-byte cap", held, limit)
			}
		})
	}
}

// TestProtocolErrorQuotesBounded: a protocol error quotes what the
// guest sent only in part. The result carries the error's message
// (HTML-safe JSON, where < takes six bytes): a frame whose type was a
// frame cap of < made a protocol error of the whole, six times the cap
// in every copy of the result and once more in the daemon's log.
func TestProtocolErrorQuotesBounded(t *testing.T) {
	const limit = 64 << 10
	ceil := PermissiveCeiling()
	ceil.MaxFrame = limit
	for name, frame := range map[string]string{
		"unknown frame type": `{"type":"` + strings.Repeat("<", limit-16) + `"}`,
		"a note's method":    `{"type":"note","method":"` + strings.Repeat("<", limit-40) + `","params":{}}`,
		"a call's id":        `{"type":"call","method":"log.info","id":"` + strings.Repeat("<", limit-60) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			noLeak(t)
			r := startServe(t, context.Background(), SessionConfig{Ceiling: ceil})
			if _, err := r.g.conn.Write(frameBytes(frame)); err != nil {
				t.Fatal(err)
			}
			out := r.wait(t, 5*time.Second)
			if out.ProtocolError == nil {
				t.Fatal("no protocol error")
			}
			if n := len(mustJSON(out.ProtocolError.Error())); n > 1024 {
				t.Errorf("a protocol error of %d bytes as JSON for a %d-byte frame: %.120s…", n, len(frame), out.ProtocolError)
			}
		})
	}
}

func TestServeEOF(t *testing.T) {
	noLeak(t)
	r := startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling()})
	r.g.conn.Close()
	out := r.wait(t, 5*time.Second)
	if out.Done || out.Error != nil || out.ProtocolError != nil {
		t.Fatalf("outcome %+v", out)
	}
}

func TestServeContextCancel(t *testing.T) {
	noLeak(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := startServe(t, ctx, SessionConfig{Ceiling: PermissiveCeiling()})
	// Half a frame in the buffer, then the run is cancelled.
	_, _ = r.g.conn.Write([]byte{0, 0, 0, 50, '{'})
	time.Sleep(20 * time.Millisecond)
	cancel()
	out := r.wait(t, 2*time.Second)
	if out.ProtocolError != nil || out.Done {
		t.Fatalf("outcome %+v", out)
	}
}

func TestLogs(t *testing.T) {
	noLeak(t)
	var mu sync.Mutex
	var seen []Log
	ceil := PermissiveCeiling()
	ceil.MaxLogs = 3
	ceil.MaxLogMessage = 16
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil,
		OnLog: func(l Log) { mu.Lock(); seen = append(seen, l); mu.Unlock() }})
	wantOK(t, r.g.call("log.info", map[string]any{"message": "hello", "meta": map[string]int{"n": 1}}))
	wantOK(t, r.g.call("log.warn", map[string]any{"message": strings.Repeat("é", 20)}))
	wantCode(t, r.g.call("log.error", map[string]any{"message": "m", "meta": strings.Repeat("x", 100)}), CodeTooLarge)
	wantCode(t, r.g.call("log.info", map[string]any{"msg": "wrong field"}), CodeInvalidRequest)
	wantCode(t, r.g.call("log.info", map[string]any{"message": 5}), CodeInvalidRequest)
	wantCode(t, r.g.call("log.info", map[string]any{"message": "deep", "meta": json.RawMessage(nested(70))}), CodeInvalidRequest)
	wantOK(t, r.g.call("log.debug", map[string]any{"message": "third", "meta": nil}))
	wantCode(t, r.g.call("log.info", map[string]any{"message": "fourth"}), CodeRateLimited)
	wantCode(t, r.g.call("log.trace", map[string]any{"message": "x"}), CodeUnsupported)
	out := r.finish(t)
	if len(out.Logs) != 3 || out.LogsDropped != 1 {
		t.Fatalf("logs %+v dropped %d", out.Logs, out.LogsDropped)
	}
	if out.Logs[0].Level != "info" || out.Logs[0].Message != "hello" || string(out.Logs[0].Meta) != `{"n":1}` {
		t.Fatalf("first log %+v", out.Logs[0])
	}
	if m := out.Logs[1].Message; !strings.HasSuffix(m, truncatedMark) || len(m) > 16+len(truncatedMark) || !strings.HasPrefix(m, "éééé") {
		t.Fatalf("long message not cut cleanly: %q", m)
	}
	if out.Logs[2].Level != "debug" || out.Logs[2].Meta != nil {
		t.Fatalf("third log %+v", out.Logs[2])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 {
		t.Fatalf("OnLog saw %d entries", len(seen))
	}
}

// TestLogBudgetCountsEscaped: the run's log budget counts a log as the
// result holds it, in JSON, where <, >, & and a control character take
// six bytes and U+2028 and U+2029 six: counting raw bytes let a guest's
// logs take six times the budget in every result and event that carries
// them. The meta is kept in that form (compacted, HTML-safe), so that
// the bytes counted are the bytes held.
func TestLogBudgetCountsEscaped(t *testing.T) {
	noLeak(t)
	ceil := PermissiveCeiling()
	ceil.MaxLogBytes = 100
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
	// 5×6 + 6 + 6 + 2 bytes of message, 14 of meta ({"a":"\u003c"}):
	// 58 of the 100, 24 raw.
	wantOK(t, r.g.call("log.info", map[string]any{"message": "<><>&\x01\u2028é", "meta": json.RawMessage(`{ "a" : "<" }`)}))
	wantOK(t, r.g.call("log.info", map[string]any{"message": strings.Repeat("x", 40)}))
	wantCode(t, r.g.call("log.info", map[string]any{"message": "&"}), CodeRateLimited)
	out := r.finish(t)
	if len(out.Logs) != 2 || out.LogsDropped != 1 {
		t.Fatalf("%d logs kept, %d dropped, want 2 and 1: %+v", len(out.Logs), out.LogsDropped, out.Logs)
	}
	if m := string(out.Logs[0].Meta); m != `{"a":"\u003c"}` {
		t.Errorf("meta kept as %s, want it compacted and HTML-safe", m)
	}
	held := 0
	for _, l := range out.Logs {
		msg, err := json.Marshal(l.Message)
		if err != nil {
			t.Fatal(err)
		}
		meta, err := json.Marshal(l.Meta)
		if err != nil || l.Meta == nil {
			meta = nil
		}
		held += len(msg) - 2 + len(meta)
	}
	if held > ceil.MaxLogBytes {
		t.Errorf("logs of %d bytes as JSON under a %d-byte budget", held, ceil.MaxLogBytes)
	}
}

func TestLogWithoutCapabilityDenied(t *testing.T) {
	noLeak(t)
	r := startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling()})
	wantCode(t, r.g.call("log.info", map[string]any{"message": "hi"}), CodeDenied)
	out := r.finish(t)
	if len(out.Logs) != 0 || out.Denied["log.info"] != 1 {
		t.Fatalf("outcome %+v", out)
	}
}

func TestOnLogPanicIsContained(t *testing.T) {
	noLeak(t)
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: PermissiveCeiling(),
		OnLog: func(Log) { panic("broker bug") }})
	wantCode(t, r.g.call("log.info", map[string]any{"message": "boom"}), CodeInternal)
	wantOK(t, r.g.call("input.get", nil)) // the session carries on
	if out := r.finish(t); !out.Done {
		t.Fatalf("outcome %+v", out)
	}
}

func TestNestingCap(t *testing.T) {
	noLeak(t)
	// At the cap: accepted.
	r := startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling()})
	r.g.send(map[string]any{"type": "done", "value": json.RawMessage(nested(MaxValueDepth))})
	if out := r.wait(t, 5*time.Second); !out.Done || string(out.Value) != nested(MaxValueDepth) {
		t.Fatalf("depth %d: %+v", MaxValueDepth, out)
	}
	// One deeper: a clear error, not a protocol breach.
	r = startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling()})
	r.g.send(map[string]any{"type": "done", "value": json.RawMessage(nested(MaxValueDepth + 1))})
	out := r.wait(t, 5*time.Second)
	if out.Done || out.Error == nil || out.Error.Name != "ResultError" || !strings.Contains(out.Error.Message, "deeper than 64") {
		t.Fatalf("depth %d: %+v", MaxValueDepth+1, out)
	}
	// Deeper than a frame may be: protocol error.
	r = startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling()})
	_, _ = r.g.conn.Write(frameBytes(`{"type":"done","value":` + nested(100000) + `}`))
	out = r.wait(t, 5*time.Second)
	if !errors.Is(out.ProtocolError, ErrProtocol) || !errors.Is(out.ProtocolError, ErrTooDeep) {
		t.Fatalf("depth 100000: %+v", out)
	}
}

// hostile runs Serve against a guest that writes raw bytes, and checks that
// Serve ends promptly with a protocol error.
func hostile(t *testing.T, ceil Ceiling, limit time.Duration, attack func(g net.Conn)) Outcome {
	t.Helper()
	noLeak(t)
	r := startServe(t, context.Background(), SessionConfig{Ceiling: ceil})
	go attack(r.g.conn)
	t0 := time.Now()
	out := r.wait(t, limit)
	if out.ProtocolError == nil || !errors.Is(out.ProtocolError, ErrProtocol) {
		t.Fatalf("want a protocol error, got %+v", out)
	}
	t.Logf("ended after %s: %v", time.Since(t0).Round(time.Millisecond), out.ProtocolError)
	r.g.conn.Close()
	return out
}

func TestHostileFrames(t *testing.T) {
	ceil := PermissiveCeiling()
	ceil.FrameTimeout = 200 * time.Millisecond
	t.Run("100 MiB length header", func(t *testing.T) {
		out := hostile(t, ceil, time.Second, func(g net.Conn) {
			_, _ = g.Write(binary.BigEndian.AppendUint32(nil, 100<<20))
		})
		if !errors.Is(out.ProtocolError, ErrFrameTooLarge) {
			t.Fatal(out.ProtocolError)
		}
	})
	t.Run("invalid JSON", func(t *testing.T) {
		hostile(t, ceil, time.Second, func(g net.Conn) { _, _ = g.Write(frameBytes(`{"type":"call",`)) })
	})
	t.Run("unknown type", func(t *testing.T) {
		hostile(t, ceil, time.Second, func(g net.Conn) { _, _ = g.Write(frameBytes(`{"type":"reply","id":1}`)) })
	})
	t.Run("wrong field type", func(t *testing.T) {
		hostile(t, ceil, time.Second, func(g net.Conn) { _, _ = g.Write(frameBytes(`{"type":7}`)) })
	})
	for _, id := range []string{`0`, `-1`, `1.5`, `"1"`, `null`, `9007199254740992`, `1e3`} {
		t.Run("call id "+id, func(t *testing.T) {
			hostile(t, ceil, time.Second, func(g net.Conn) {
				_, _ = g.Write(frameBytes(`{"type":"call","id":` + id + `,"method":"input.get"}`))
			})
		})
	}
	t.Run("error frame without error", func(t *testing.T) {
		hostile(t, ceil, time.Second, func(g net.Conn) { _, _ = g.Write(frameBytes(`{"type":"error"}`)) })
	})
	t.Run("frame that never finishes", func(t *testing.T) {
		out := hostile(t, ceil, 2*time.Second, func(g net.Conn) {
			_, _ = g.Write(append(binary.BigEndian.AppendUint32(nil, 100), `{"type":"ca`...))
		})
		if !strings.Contains(out.ProtocolError.Error(), "did not finish") {
			t.Fatal(out.ProtocolError)
		}
	})
	t.Run("header that never finishes", func(t *testing.T) {
		hostile(t, ceil, 2*time.Second, func(g net.Conn) { _, _ = g.Write([]byte{0, 0}) })
	})
	t.Run("random garbage", func(t *testing.T) {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, seed))
			garbage := make([]byte, 5+rng.IntN(4096))
			for i := range garbage {
				garbage[i] = byte(rng.UintN(256))
			}
			if seed%2 == 0 {
				// A believable length, so the body itself is parsed.
				binary.BigEndian.PutUint32(garbage, uint32(len(garbage)-4))
				garbage[4] = '{'
			}
			hostile(t, ceil, 2*time.Second, func(g net.Conn) {
				_, _ = g.Write(garbage)
				g.(interface{ CloseWrite() error }).CloseWrite()
			})
		}
	})
}

func TestGuestThatStopsReading(t *testing.T) {
	noLeak(t)
	ceil := PermissiveCeiling()
	ceil.WriteTimeout = 200 * time.Millisecond
	host, gconn := net.Pipe() // no buffer at all: the first unread reply blocks
	defer gconn.Close()
	done := make(chan Outcome, 1)
	go func() { done <- Serve(context.Background(), host, SessionConfig{Ceiling: ceil}) }()
	select {
	case out := <-done:
		if !errors.Is(out.ProtocolError, ErrProtocol) || !strings.Contains(out.ProtocolError.Error(), "did not read") {
			t.Fatalf("outcome %+v", out)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve blocked on a guest that never reads")
	}
	host.Close()
}

func TestCallFlood(t *testing.T) {
	noLeak(t)
	const n = 10000
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: PermissiveCeiling()})
	go func() {
		buf := []byte{}
		for i := 1; i <= n; i++ {
			buf, _ = AppendFrame(buf, map[string]any{"type": "call", "id": i, "method": "log.info", "params": map[string]string{"message": "flood"}}, DefaultMaxFrame)
			if len(buf) > 64<<10 || i == n {
				if _, err := r.g.conn.Write(buf); err != nil {
					return
				}
				buf = buf[:0]
			}
		}
		_ = WriteFrame(r.g.conn, map[string]any{"type": "done"})
	}()
	codes := map[string]int{}
	t0 := time.Now()
	for range n {
		f := r.g.recv()
		if f.OK {
			codes["ok"]++
		} else {
			codes[f.Error.Code]++
		}
	}
	out := r.wait(t, 10*time.Second)
	t.Logf("%d calls in %s: %v", n, time.Since(t0).Round(time.Millisecond), codes)
	if codes["ok"] != DefaultMaxCalls || codes[CodeRateLimited] != n-DefaultMaxCalls {
		t.Fatalf("codes %v", codes)
	}
	if !out.Done || out.Calls != n || len(out.Logs) != DefaultMaxCalls {
		t.Fatalf("outcome done=%v calls=%d logs=%d", out.Done, out.Calls, len(out.Logs))
	}
}

func BenchmarkBrokerDispatch(b *testing.B) {
	host, gconn := socketPair(b)
	done := make(chan Outcome, 1)
	ceil := PermissiveCeiling()
	ceil.MaxCalls = 1 << 30
	ceil.MaxLogs = 1 << 30
	ceil.MaxLogBytes = 1 << 40
	// Every frame counts at least 512 bytes against the budget: b.N of
	// them must fit, or the session ends partway.
	ceil.MaxGuestBytes = 1 << 50
	go func() {
		done <- Serve(context.Background(), host, SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
	}()
	g := newTestGuest(b, gconn)
	g.recv()
	b.ReportAllocs()
	for b.Loop() {
		if f := g.call("log.info", map[string]string{"message": "bench"}); !f.OK {
			b.Fatal(f.Error)
		}
	}
	b.StopTimer()
	g.send(map[string]any{"type": "done"})
	<-done
}

// TestAppendStart: the start frame with the input spliced in reads back
// as the frame json.Marshal would build, and input that is not JSON, or
// a frame over the cap, is refused.
func TestAppendStart(t *testing.T) {
	start := startFrame{Type: typeStart, Capabilities: Capabilities{Log: true}, Options: startOptions{Timing: "coarse"}}
	for _, input := range []string{`null`, ` {"a": [1, "<&>"], "b": "héllo"} `, `"x"`} {
		got, err := appendStart(nil, json.RawMessage(input), start, DefaultMaxFrame)
		if err != nil {
			t.Fatalf("%s: %v", input, err)
		}
		body, err := ReadFrame(bytes.NewReader(got), DefaultMaxFrame)
		if err != nil {
			t.Fatalf("%s: %v", input, err)
		}
		want := start
		want.Input = json.RawMessage(input)
		wantBody, _ := json.Marshal(want)
		var g, w any
		if json.Unmarshal(body, &g) != nil || json.Unmarshal(wantBody, &w) != nil || !reflect.DeepEqual(g, w) {
			t.Errorf("%s: frame %s, want the value of %s", input, body, wantBody)
		}
	}
	if _, err := appendStart(nil, json.RawMessage(`{x`), start, DefaultMaxFrame); err == nil {
		t.Error("input that is not JSON was spliced in")
	}
	if _, err := appendStart(nil, json.RawMessage(`"`+strings.Repeat("x", 100)+`"`), start, 64); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("a frame over the cap: %v, want ErrFrameTooLarge", err)
	}
}

// TestAppendStartSource: a warm runtime's start frame carries the program
// after the input; a cold run's carries none.
func TestAppendStartSource(t *testing.T) {
	for _, src := range []*StartSource{nil, {Text: "console.log(\"<&>\")\n", MediaType: "text/tsx"}} {
		start := startFrame{Type: typeStart, Options: startOptions{Timing: "precise"}, Source: src}
		got, err := appendStart(nil, json.RawMessage(`{"n":1}`), start, DefaultMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		body, err := ReadFrame(bytes.NewReader(got), DefaultMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		var frame struct {
			Input  map[string]int `json:"input"`
			Source *StartSource   `json:"source"`
		}
		if err := json.Unmarshal(body, &frame); err != nil {
			t.Fatalf("frame %s: %v", body, err)
		}
		if frame.Input["n"] != 1 || !reflect.DeepEqual(frame.Source, src) {
			t.Errorf("frame %s: input %v, source %+v; want %+v", body, frame.Input, frame.Source, src)
		}
	}
}

// An error frame keeps what the guest threw and its cause chain; a value
// nested too deep to pass on is dropped, the error still stands.
func TestGuestErrorValueAndCause(t *testing.T) {
	noLeak(t)
	r := startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling()})
	r.g.send(map[string]any{"type": "error", "error": map[string]any{
		"name": "Error", "message": "outer", "value": map[string]any{"code": "E_OUTER"},
		"cause": map[string]any{"name": "TypeError", "message": "inner", "value": json.RawMessage(nested(MaxValueDepth + 1))},
	}})
	out := r.wait(t, 5*time.Second)
	e := out.Error
	if e == nil || e.Name != "Error" || string(e.Value) != `{"code":"E_OUTER"}` || e.Cause == nil {
		t.Fatalf("error %+v", e)
	}
	if e.Cause.Name != "TypeError" || e.Cause.Message != "inner" || e.Cause.Value != nil {
		t.Errorf("cause %+v, want TypeError inner without its too-deep value", e.Cause)
	}
}
