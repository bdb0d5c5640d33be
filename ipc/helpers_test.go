package ipc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketPair returns both ends of a real SOCK_STREAM socketpair, as the jail
// makes one per run.
func socketPair(t testing.TB) (host, guest net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(os.NewSyscallError("socketpair", err))
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "ipc-test")
		c, err := net.FileConn(f) // dups the fd
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	t.Cleanup(func() { conns[0].Close(); conns[1].Close() })
	return conns[0], conns[1]
}

// hostFrame is what the simulated guest decodes from the host.
type hostFrame struct {
	Type         string          `json:"type"`
	ID           uint64          `json:"id"`
	OK           bool            `json:"ok"`
	Value        json.RawMessage `json:"value"`
	Error        *CallError      `json:"error"`
	Credit       *logCredit      `json:"credit"`
	Input        json.RawMessage `json:"input"`
	Capabilities json.RawMessage `json:"capabilities"`
	Options      struct {
		Timing string `json:"timing"`
	} `json:"options"`
}

// testGuest speaks the protocol from the guest's side, keeping every byte
// the host sent so tests can search it.
type testGuest struct {
	t      testing.TB
	conn   net.Conn
	br     *bufio.Reader
	mu     sync.Mutex
	seen   bytes.Buffer
	nextID uint64
	// wait is how long recv waits for a frame: a hang fails in 20 s
	// unless a test that moves many large frames allows more.
	wait time.Duration
}

type teeReader struct{ g *testGuest }

func (r teeReader) Read(p []byte) (int, error) {
	n, err := r.g.conn.Read(p)
	r.g.mu.Lock()
	r.g.seen.Write(p[:n])
	r.g.mu.Unlock()
	return n, err
}

func newTestGuest(t testing.TB, conn net.Conn) *testGuest {
	g := &testGuest{t: t, conn: conn, wait: 20 * time.Second}
	g.br = bufio.NewReader(teeReader{g})
	return g
}

func (g *testGuest) send(v any) {
	g.t.Helper()
	if err := WriteFrame(g.conn, v); err != nil {
		g.t.Fatalf("guest send: %v", err)
	}
}

func (g *testGuest) recv() hostFrame {
	g.t.Helper()
	_ = g.conn.SetReadDeadline(time.Now().Add(g.wait))
	body, err := ReadFrame(g.br, 64<<20)
	if err != nil {
		g.t.Fatalf("guest recv: %v", err)
	}
	var f hostFrame
	if err := json.Unmarshal(body, &f); err != nil {
		g.t.Fatalf("guest decode %q: %v", body, err)
	}
	return f
}

// call sends one call and waits for its reply.
func (g *testGuest) call(method string, params any) hostFrame {
	g.t.Helper()
	g.nextID++
	id := g.nextID
	g.send(map[string]any{"type": "call", "id": id, "method": method, "params": params})
	f := g.recv()
	if f.Type != "reply" || f.ID != id {
		g.t.Fatalf("want reply %d, got %+v", id, f)
	}
	return f
}

func (g *testGuest) sawBytes() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return bytes.Clone(g.seen.Bytes())
}

// session runs Serve on a socketpair and returns the guest end (past the
// start frame) and a function that waits for Serve's outcome.
type running struct {
	g     *testGuest
	start hostFrame
	done  chan Outcome
}

func startServe(t testing.TB, ctx context.Context, cfg SessionConfig) *running {
	t.Helper()
	host, gconn := socketPair(t)
	r := &running{g: newTestGuest(t, gconn), done: make(chan Outcome, 1)}
	go func() { r.done <- Serve(ctx, host, cfg) }()
	r.start = r.g.recv()
	if r.start.Type != "start" {
		t.Fatalf("first frame %+v, want start", r.start)
	}
	return r
}

// wait returns Serve's outcome, failing if it takes longer than limit.
func (r *running) wait(t testing.TB, limit time.Duration) Outcome {
	t.Helper()
	select {
	case out := <-r.done:
		return out
	case <-time.After(limit):
		t.Fatalf("Serve did not return within %s", limit)
		return Outcome{}
	}
}

func (r *running) finish(t testing.TB) Outcome {
	t.Helper()
	r.g.send(map[string]any{"type": "done", "value": nil})
	return r.wait(t, 5*time.Second)
}

// noLeak fails the test if goroutines started during it are still running
// once its cleanups (registered later, so run earlier) are done.
func noLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:n])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func wantCode(t testing.TB, f hostFrame, code string) {
	t.Helper()
	if f.OK || f.Error == nil || f.Error.Code != code {
		t.Fatalf("want error %s, got ok=%v value=%s error=%+v", code, f.OK, f.Value, f.Error)
	}
}

func wantOK(t testing.TB, f hostFrame) {
	t.Helper()
	if !f.OK || f.Error != nil {
		t.Fatalf("want ok, got error %+v", f.Error)
	}
}

func nested(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}
