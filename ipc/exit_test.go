package ipc

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestServeExit: an exit frame ends the session and hands its code to
// OnExit; a code that is no exit code is a protocol error, and nobody
// hears it.
func TestServeExit(t *testing.T) {
	noLeak(t)
	var said []int
	r := startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling(), OnExit: func(code int) { said = append(said, code) }})
	r.g.send(map[string]any{"type": "exit", "code": 3})
	out := r.wait(t, 5*time.Second)
	if out.ProtocolError != nil || out.Done || out.Error != nil {
		t.Fatalf("outcome %+v", out)
	}
	if len(said) != 1 || said[0] != 3 {
		t.Fatalf("OnExit heard %v, want [3]", said)
	}

	for _, bad := range []any{nil, -1, 256, 1.5, "0"} {
		said = nil
		r := startServe(t, context.Background(), SessionConfig{Ceiling: PermissiveCeiling(), OnExit: func(code int) { said = append(said, code) }})
		r.g.send(map[string]any{"type": "exit", "code": bad})
		out := r.wait(t, 5*time.Second)
		if bad == 1.5 || bad == "0" {
			// Not an integer: the frame does not decode.
			if out.ProtocolError == nil {
				t.Errorf("code %v: no protocol error", bad)
			}
		} else if out.ProtocolError == nil || !strings.Contains(out.ProtocolError.Error(), "exit frame") {
			t.Errorf("code %v: protocol error %v, want one naming the exit frame", bad, out.ProtocolError)
		}
		if len(said) != 0 {
			t.Errorf("code %v: OnExit heard %v", bad, said)
		}
	}
}
