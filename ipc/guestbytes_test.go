package ipc

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestGuestBytesBudget: decoding a frame costs the daemon many times what
// writing it costs the guest, and none of it counts as the run's CPU time,
// so a guest that floods the channel with large frames (a megabyte log
// message, over and over) would hold a daemon core for its whole wall
// time. Past MaxGuestBytes, a call is answered rate_limited and a note
// dropped without their bodies being decoded at all; the last frame still
// ends the run.
func TestGuestBytesBudget(t *testing.T) {
	noLeak(t)
	ceil := PermissiveCeiling()
	ceil.MaxGuestBytes = 256 << 10
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
	big := strings.Repeat("x", 100<<10)
	wantOK(t, orderedCall(r.g, "log.info", map[string]any{"message": big}))
	wantOK(t, orderedCall(r.g, "log.info", map[string]any{"message": big}))
	over := orderedCall(r.g, "log.info", map[string]any{"message": big})
	wantCode(t, over, CodeRateLimited)
	if !strings.Contains(over.Error.Message, "262144 bytes") {
		t.Errorf("refusal %q does not name the budget", over.Error.Message)
	}
	r.g.send(orderedNote{"note", "log.info", map[string]any{"message": big}})
	// Past the budget the body is not decoded: a call whose params are
	// not even JSON is answered as any other, and the channel stays in
	// step.
	r.g.nextID++
	junk := `{"type":"call","id":` + strconv.FormatUint(r.g.nextID, 10) + `,"method":"log.info","params":` + strings.Repeat("{", 5000)
	if _, err := r.g.conn.Write(frameBytes(junk)); err != nil {
		t.Fatal(err)
	}
	if f := r.g.recv(); f.ID != r.g.nextID {
		t.Fatalf("reply %+v, want one to call %d", f, r.g.nextID)
	} else {
		wantCode(t, f, CodeRateLimited)
	}
	r.g.send(struct {
		Type  string         `json:"type"`
		Value map[string]any `json:"value"`
	}{"done", map[string]any{"ok": true}})
	out := r.wait(t, 5*time.Second)
	if out.ProtocolError != nil || !out.Done || string(out.Value) != `{"ok":true}` {
		t.Fatalf("outcome %+v, want done with its value", out)
	}
	if len(out.Logs) != 2 || out.LogsDropped != 3 || out.Calls != 5 {
		t.Errorf("logs %d dropped %d calls %d, want 2 kept, 3 dropped (two calls and a note), 5 calls", len(out.Logs), out.LogsDropped, out.Calls)
	}
}

// TestGuestBytesBudgetHidden: past the budget a frame must say first what
// it is; one that hides its type behind its body would have to be decoded
// whole to be refused, and ends the run as a protocol error.
func TestGuestBytesBudgetHidden(t *testing.T) {
	ceil := PermissiveCeiling()
	ceil.MaxGuestBytes = 64 << 10
	ceil.FrameTimeout = 2 * time.Second
	big := strings.Repeat("x", 80<<10)
	out := hostile(t, ceil, 5*time.Second, func(g net.Conn) {
		_ = WriteFrame(g, orderedNote{"note", "log.info", map[string]any{"message": big}})
		_, _ = g.Write(frameBytes(`{"params":{"message":"` + big + `"},"type":"call","id":1,"method":"log.info"}`))
	})
	if !strings.Contains(out.ProtocolError.Error(), "type first") {
		t.Fatal(out.ProtocolError)
	}
}

// TestGuestBytesBudgetCut: a frame cut short past the budget is the same
// protocol error as one cut short within it.
func TestGuestBytesBudgetCut(t *testing.T) {
	ceil := PermissiveCeiling()
	ceil.MaxGuestBytes = 1 << 10
	ceil.FrameTimeout = 200 * time.Millisecond
	hostile(t, ceil, 3*time.Second, func(g net.Conn) {
		_ = WriteFrame(g, orderedNote{"note", "log.info", map[string]any{"message": strings.Repeat("x", 2<<10)}})
		_, _ = g.Write(append(binary.BigEndian.AppendUint32(nil, 100), `{"type":"call","id":1,`...))
	})
}

// TestGuestBytesBudgetHeadsCheap: past the budget a frame's head is read
// at little more than what writing it costs the guest. A head of a
// thousand one-byte members, decoded token by token, cost the daemon
// ~400 µs a frame (10 MB/s): a guest writing such notes in a loop held a
// daemon core for its wall time while it sat blocked in write itself.
func TestGuestBytesBudgetHeadsCheap(t *testing.T) {
	noLeak(t)
	ceil := PermissiveCeiling()
	ceil.MaxGuestBytes = 1 << 10
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
	head := `{"type":"note"` + strings.Repeat(`,"a":0`, maxCallHead/6)
	frame := frameBytes(head[:maxCallHead-1] + "}")
	const n = 4096 // 16 MiB
	out, cpu := flood(t, r, bytes.Repeat(frame, n))
	t.Logf("%d frames of %d bytes past the budget: %s of CPU", n, len(frame), cpu)
	if !out.Done || out.ProtocolError != nil || out.Calls != n {
		t.Fatalf("outcome done=%v calls=%d err=%v, want done after %d notes", out.Done, out.Calls, out.ProtocolError, n)
	}
	if cpu > 500*time.Millisecond {
		t.Errorf("reading %d frames' heads past the budget took %s of CPU, want well under 500ms", n, cpu)
	}
}

// TestGuestBytesBudgetSmallFrames: small frames cost the host a decoding
// and a dispatch each and the guest next to nothing, a thousand of them a
// write. Within the budget each counts at least minFrameCharge; past it a
// run may send maxFramesPastBudget calls and notes, then it is a protocol
// error. Before, 64 MiB of 60-byte notes cost the daemon 2 s of CPU
// within the budget, and a guest writing them on held a daemon core for
// its wall time.
func TestGuestBytesBudgetSmallFrames(t *testing.T) {
	noLeak(t)
	frame := frameBytes(`{"type":"note","method":"log.info","params":{"message":""}}`)
	want := int(DefaultMaxGuestBytes/minFrameCharge) + maxFramesPastBudget
	// notes sends n notes then done, and returns the session's outcome
	// and the CPU the process spent meanwhile.
	notes := func(n int) (Outcome, time.Duration) {
		t.Helper()
		r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: PermissiveCeiling()})
		return flood(t, r, bytes.Repeat(frame, n))
	}
	const n = 1 << 20 // 63 MiB
	out, cpu := notes(n)
	t.Logf("%d small notes: %s of CPU, %d calls, %v", n, cpu, out.Calls, out.ProtocolError)
	if out.ProtocolError == nil || !strings.Contains(out.ProtocolError.Error(), "past the run's") {
		t.Errorf("outcome done=%v calls=%d err=%v, want a protocol error past the budget", out.Done, out.Calls, out.ProtocolError)
	}
	if out.Calls != want {
		t.Errorf("%d calls counted, want %d", out.Calls, want)
	}
	// The control: as many notes as the budget lets through, then done.
	// The flood must cost about what they cost, not what all of it
	// would (seven times as many frames).
	_, control := notes(want)
	t.Logf("%d notes alone: %s of CPU", want, control)
	if cpu > 2*control+200*time.Millisecond {
		t.Errorf("%d small notes took %s of CPU, %d of them alone %s: the host read on past the budget", n, cpu, want, control)
	}
}

// orderedNote and orderedCall are frames with their members in the
// guest's order (channel.js): type, id and method before params.
type orderedNote struct {
	Type   string `json:"type"`
	Method string `json:"method"`
	Params any    `json:"params"`
}

func orderedCall(g *testGuest, method string, params any) hostFrame {
	g.t.Helper()
	g.nextID++
	g.send(struct {
		Type   string `json:"type"`
		ID     uint64 `json:"id"`
		Method string `json:"method"`
		Params any    `json:"params"`
	}{"call", g.nextID, method, params})
	f := g.recv()
	if f.Type != "reply" || f.ID != g.nextID {
		g.t.Fatalf("want reply %d, got %+v", g.nextID, f)
	}
	return f
}

// flood writes frames as r's guest, then a done frame, and returns the
// session's outcome and the CPU the process spent until it ended.
func flood(t *testing.T, r *running, frames []byte) (Outcome, time.Duration) {
	t.Helper()
	before := processCPU(t)
	go func() {
		_, _ = r.g.conn.Write(frames)
		_ = WriteFrame(r.g.conn, map[string]any{"type": "done"})
	}()
	out := r.wait(t, 60*time.Second)
	return out, processCPU(t) - before
}

// processCPU is the user and system time the test process has spent.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var u unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &u); err != nil {
		t.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
