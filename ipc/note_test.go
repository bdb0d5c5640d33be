package ipc

import (
	"context"
	"strings"
	"testing"
	"time"
)

func note(method, message string) map[string]any {
	return map[string]any{"type": "note", "method": method, "params": map[string]any{"message": message}}
}

// TestNoteWithinCredit: an accepted log call's reply carries what the
// run's budgets still hold; notes within it are kept, in order, as calls
// would be, and answered by nothing: the next frame the guest reads is
// the reply to its next call, which sees the budget the notes spent.
func TestNoteWithinCredit(t *testing.T) {
	noLeak(t)
	ceil := PermissiveCeiling()
	ceil.MaxCalls, ceil.MaxLogs, ceil.MaxLogBytes, ceil.MaxLogMessage = 10, 5, 100, 50
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
	first := r.g.call("log.info", map[string]any{"message": "a"})
	wantOK(t, first)
	if c := first.Credit; c == nil || *c != (logCredit{Calls: 9, Logs: 4, Bytes: 99, Message: 50, Frame: ceil.MaxFrame}) {
		t.Fatalf("credit %+v, want 9 calls, 4 logs, 99 bytes, 50, %d", c, ceil.MaxFrame)
	}
	for _, m := range []string{"b", "c", "d", "e"} {
		r.g.send(note("log.warn", m))
	}
	full := r.g.call("log.info", map[string]any{"message": "f"})
	wantCode(t, full, CodeRateLimited)
	if full.Credit != nil {
		t.Errorf("a refused call's reply carries credit %+v", full.Credit)
	}
	out := r.finish(t)
	var got []string
	for _, l := range out.Logs {
		got = append(got, l.Level+":"+l.Message)
	}
	if strings.Join(got, " ") != "info:a warn:b warn:c warn:d warn:e" || out.Calls != 6 || out.LogsDropped != 1 {
		t.Errorf("logs %v calls %d dropped %d, want a..e, 6 calls, 1 dropped", got, out.Calls, out.LogsDropped)
	}
}

// TestNoteAttacks: a guest writing its own notes, past the credit or
// where none was given, gets nothing a call would not: every note is
// counted against the run's calls, checked against its capability and
// budgets, cut and scrubbed, and one for a method other than a log's is
// a protocol error. None is answered.
func TestNoteAttacks(t *testing.T) {
	t.Run("past the budgets", func(t *testing.T) {
		noLeak(t)
		ceil := PermissiveCeiling()
		ceil.MaxCalls, ceil.MaxLogs, ceil.MaxLogMessage = 8, 5, 16
		r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
		for range 20 {
			r.g.send(note("log.info", strings.Repeat("x", 40)))
		}
		r.g.send(map[string]any{"type": "note", "method": "log.info", "params": map[string]any{"message": "deep", "meta": []any{[]any{[]any{}}}}})
		wantCode(t, r.g.call("input.get", nil), CodeRateLimited)
		out := r.finish(t)
		if len(out.Logs) != 5 || out.Calls != 22 || out.LogsDropped != 3 {
			t.Errorf("%d logs, %d calls, %d dropped, want 5 kept of 8 within the call budget, 22 calls, 3 dropped", len(out.Logs), out.Calls, out.LogsDropped)
		}
		for _, l := range out.Logs {
			if !strings.HasSuffix(l.Message, truncatedMark) || len(l.Message) != 16+len(truncatedMark) {
				t.Errorf("a note's message %q not cut at 16 bytes", l.Message)
			}
		}
	})
	t.Run("without the capability", func(t *testing.T) {
		noLeak(t)
		r := startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling()})
		r.g.send(note("log.error", "no"))
		denied := r.g.call("log.info", map[string]any{"message": "no"})
		wantCode(t, denied, CodeDenied)
		if denied.Credit != nil {
			t.Errorf("a denied log call's reply carries credit %+v", denied.Credit)
		}
		out := r.finish(t)
		if len(out.Logs) != 0 || out.Denied["log.error"] != 1 || out.Denied["log.info"] != 1 || out.Calls != 2 {
			t.Errorf("logs %v denied %v calls %d, want none kept, both denied, 2 calls", out.Logs, out.Denied, out.Calls)
		}
	})
	t.Run("secrets scrubbed, no credit", func(t *testing.T) {
		noLeak(t)
		ceil := PermissiveCeiling()
		ceil.Secrets = map[string]Secret{"k": {Value: "s3cret-value", Origins: []string{"https://a.example"}}}
		r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
		r.g.send(note("log.info", "leak s3cret-value"))
		reply := r.g.call("log.info", map[string]any{"message": "x"})
		wantOK(t, reply)
		if reply.Credit != nil {
			t.Errorf("credit %+v while the scrubber holds secrets, want none", reply.Credit)
		}
		out := r.finish(t)
		if len(out.Logs) != 2 || strings.Contains(out.Logs[0].Message, "s3cret") {
			t.Errorf("logs %+v, want the note's kept with its secret scrubbed", out.Logs)
		}
	})
	for _, method := range []string{"request.send", "input.get", ""} {
		t.Run("note for "+method, func(t *testing.T) {
			noLeak(t)
			r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: PermissiveCeiling()})
			r.g.send(map[string]any{"type": "note", "method": method, "params": map[string]any{"url": "http://192.0.2.1/"}})
			out := r.wait(t, 5*time.Second)
			if out.ProtocolError == nil || !strings.Contains(out.ProtocolError.Error(), "only log methods") {
				t.Errorf("protocol error %v, want a note for %q refused", out.ProtocolError, method)
			}
		})
	}
}

// BenchmarkBrokerNote is BenchmarkBrokerDispatch for notes: the host's
// work per log call the guest sends unanswered, the guest writing as
// fast as the host reads.
func BenchmarkBrokerNote(b *testing.B) {
	host, gconn := socketPair(b)
	ceil := PermissiveCeiling()
	ceil.MaxCalls = 1 << 30
	ceil.MaxLogs = 1 << 30
	ceil.MaxLogBytes = 1 << 40
	// Every frame counts at least 512 bytes against the budget: b.N of
	// them must fit, or the session ends partway.
	ceil.MaxGuestBytes = 1 << 50
	done := make(chan Outcome, 1)
	go func() {
		done <- Serve(context.Background(), host, SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
	}()
	g := newTestGuest(b, gconn)
	g.recv()
	frame, err := AppendFrame(nil, note("log.info", "bench"), DefaultMaxFrame)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := gconn.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
	// The last call's reply comes after every note before it is handled.
	wantOK(b, g.call("log.info", map[string]string{"message": "end"}))
	b.StopTimer()
	g.send(map[string]any{"type": "done"})
	if out := <-done; out.Calls != b.N+1 {
		b.Fatalf("%d calls, want %d", out.Calls, b.N+1)
	}
}
