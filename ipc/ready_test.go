package ipc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestServeReady: a cold run's guest says it is ready first, and the
// session goes on past it; a ready frame anywhere else (second, after a
// call, or at all once the pool read it: ReadySeen) is a protocol error.
func TestServeReady(t *testing.T) {
	noLeak(t)
	ready := map[string]any{"type": "ready"}
	t.Run("first", func(t *testing.T) {
		r := startServe(t, context.Background(), SessionConfig{Input: []byte(`7`), Capabilities: Capabilities{Log: true}, Ceiling: PermissiveCeiling()})
		r.g.send(ready)
		got := r.g.call("input.get", nil)
		wantOK(t, got)
		r.g.send(map[string]any{"type": "done", "value": 1})
		out := r.wait(t, 5*time.Second)
		if !out.Done || out.ProtocolError != nil || out.Calls != 1 {
			t.Fatalf("outcome %+v", out)
		}
	})
	for _, tc := range []struct {
		name   string
		seen   bool
		before []map[string]any
	}{
		{"twice", false, []map[string]any{ready}},
		{"after a call", false, []map[string]any{{"type": "call", "id": 1, "method": "input.get"}}},
		{"after the pool read it", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: PermissiveCeiling(), ReadySeen: tc.seen})
			for _, f := range tc.before {
				r.g.send(f)
				if f["type"] == "call" {
					r.g.recv()
				}
			}
			r.g.send(ready)
			out := r.wait(t, 5*time.Second)
			if !errors.Is(out.ProtocolError, ErrProtocol) || !strings.Contains(out.ProtocolError.Error(), "ready frame must be the guest's first") {
				t.Fatalf("a misplaced ready frame ended the session with %+v, want a protocol error naming it", out)
			}
		})
	}
}

// TestAwaitReady: the pool's wait reads the ready frame and nothing after
// it, and refuses anything else: another frame, silence past the timeout,
// a closed channel, or its own end (ctx).
func TestAwaitReady(t *testing.T) {
	noLeak(t)
	t.Run("ready", func(t *testing.T) {
		host, guest := socketPair(t)
		g := newTestGuest(t, guest)
		g.send(map[string]any{"type": "ready"})
		g.send(map[string]any{"type": "done"})
		if err := AwaitReady(context.Background(), host, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// The frame after it is still there, whole, with no deadline.
		body, err := ReadFrame(host, DefaultMaxFrame)
		if err != nil || string(body) != `{"type":"done"}` {
			t.Fatalf("after the ready frame: %q, %v", body, err)
		}
	})
	for _, tc := range []struct {
		name string
		act  func(g *testGuest, cancel context.CancelFunc)
		want string
	}{
		{"another frame", func(g *testGuest, _ context.CancelFunc) { g.send(map[string]any{"type": "done"}) }, `its first frame was "{\"type\":\"done\"}"`},
		{"silent", func(*testGuest, context.CancelFunc) {}, "ready within 200ms"},
		{"closed", func(g *testGuest, _ context.CancelFunc) { g.conn.Close() }, "it closed the channel"},
		{"too large", func(g *testGuest, _ context.CancelFunc) {
			g.send(map[string]any{"type": "ready", "pad": strings.Repeat("x", readyMax)})
		}, "frame too large"},
		{"cancelled", func(_ *testGuest, cancel context.CancelFunc) { cancel() }, "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, guest := socketPair(t)
			g := newTestGuest(t, guest)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			timeout := 200 * time.Millisecond
			if tc.name == "cancelled" {
				timeout = time.Minute // only the cancel may end it
			}
			tc.act(g, cancel)
			err := AwaitReady(ctx, host, timeout)
			if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AwaitReady = %v, want ErrNotReady saying %q", err, tc.want)
			}
		})
	}
}
