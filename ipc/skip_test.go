package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// oversizedCall is a call frame of exactly size body bytes whose params
// carry the bulk, as the bootstrap writes a call: type, id, method first.
func oversizedCall(id, size int) []byte {
	head := `{"type":"call","id":` + strconv.Itoa(id) + `,"method":"log.info","params":{"message":"`
	tail := `"}}`
	body := head + strings.Repeat("x", size-len(head)-len(tail)) + tail
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// A call over the frame cap is answered too_large and read past; the
// session goes on in step and ends normally.
func TestOversizedCallSkipped(t *testing.T) {
	noLeak(t)
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: PermissiveCeiling()})
	frame := oversizedCall(7, 16<<20)
	go func() { _, _ = r.g.conn.Write(frame) }()
	f := r.g.recv()
	if f.Type != "reply" || f.ID != 7 {
		t.Fatalf("got %+v, want the reply to call 7", f)
	}
	wantCode(t, f, CodeTooLarge)
	r.g.nextID = 7
	wantOK(t, r.g.call("log.info", map[string]string{"message": "after"}))
	out := r.finish(t)
	if out.ProtocolError != nil || !out.Done {
		t.Fatalf("outcome %+v, want done without a protocol error", out)
	}
	if out.Calls != 2 || len(out.Logs) != 1 || out.Logs[0].Message != "after" {
		t.Fatalf("calls %d logs %+v, want 2 calls and only the small log kept", out.Calls, out.Logs)
	}
}

// A frame over the cap that cannot be answered as a call leaves the channel
// out of step: a protocol error, as before.
func TestOversizedFrameNotSkippable(t *testing.T) {
	ceil := PermissiveCeiling()
	ceil.FrameTimeout = 300 * time.Millisecond
	big := func(body string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	pad := strings.Repeat("x", DefaultMaxFrame)
	for _, c := range []struct {
		name  string
		bytes []byte
		close bool
	}{
		{"done frame", big(`{"type":"done","value":"` + pad + `"}`), false},
		{"params before the id", big(`{"type":"call","params":{"message":"` + pad + `"},"id":3,"method":"log.info"}`), false},
		{"method string too long to see", big(`{"type":"call","id":3,"method":"` + pad + `"}`), false},
		{"not JSON", big(strings.Repeat("\x00", DefaultMaxFrame+1)), false},
		{"body never comes", binary.BigEndian.AppendUint32(nil, 16<<20), false},
		{"body cut short", oversizedCall(3, 16<<20)[:1<<20], true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := hostile(t, ceil, 5*time.Second, func(g net.Conn) {
				_, _ = g.Write(c.bytes)
				if c.close {
					_ = g.(*net.UnixConn).CloseWrite()
				}
			})
			if !errors.Is(out.ProtocolError, ErrFrameTooLarge) {
				t.Errorf("protocol error %v does not say the frame was too large", out.ProtocolError)
			}
		})
	}
}

func TestParseCallHead(t *testing.T) {
	for _, c := range []struct {
		head, id, method string
		ok               bool
	}{
		{`{"type":"call","id":12,"method":"log.info","params":{"mess`, "12", "log.info", true},
		{`{"id":12,"type":"call","method":"m","params":[1,2`, "12", "m", true},
		{`{"id":12,"type":"call","params":[1,2`, "12", "", false},
		{` { "type" : "call" , "id" : 5 , "method" : "request.send" }`, "5", "request.send", true},
		{`{"type":"call","method":"log.info","params":{},"id":1}`, "", "log.info", false},
		{`{"type":"done","id":1,"method":"x"}`, "", "", false}, // a done frame's id is not read
		{`{"type":"call","a":0,"id":1,"method":"x"}`, "1", "x", true},
		{`{"type":"call","a":0,"b":0,"id":1,"method":"x"}`, "1", "", false}, // past maxHeadMembers
		{`{"type":"call","id":"1","method":"x"}`, "", "x", false},
		{`{"type":"call","id":1`, "1", "", false},
		{`{"type":"call","id":1.5,"method":"x"}`, "1.5", "x", true}, // admitCall refuses it
		{`[{"type":"call","id":1}]`, "", "", false},
		{`{"type":"ca`, "", "", false},
		{"", "", "", false},
	} {
		id, method, ok := parseCallHead([]byte(c.head))
		if string(id) != c.id || method != c.method || ok != c.ok {
			t.Errorf("parseCallHead(%q) = %q %q %v, want %q %q %v", c.head, id, method, ok, c.id, c.method, c.ok)
		}
	}
}

// A body that does not even open an object ends the session at once, not
// after the frame timeout.
func TestOversizedGarbageEndsAtOnce(t *testing.T) {
	ceil := PermissiveCeiling()
	ceil.FrameTimeout = time.Minute
	out := hostile(t, ceil, 5*time.Second, func(g net.Conn) {
		_, _ = g.Write(append(binary.BigEndian.AppendUint32(nil, 0x7f000000), "\x00garbage"...))
	})
	if !errors.Is(out.ProtocolError, ErrFrameTooLarge) {
		t.Errorf("protocol error %v does not say the frame was too large", out.ProtocolError)
	}
}
