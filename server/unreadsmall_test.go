package server

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A client that asks and never reads holds no connection, goroutine or
// answer for ever, whatever it asked: the answers the daemon writes
// whole from memory (the OpenAPI document, the posture, health, errors,
// /metrics) had no write deadline, as the answers with a run's output
// have, so a peer that sent requests on its connections and read none
// held each one, its handler blocked in its write, up to the connection
// cap, and a shutdown waited on them.
func TestUnreadAnswersHaveADeadline(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	const asked = 100000
	paths := []string{"/v1/openapi.json", "/v1/posture", "/v1/health", "/v1/nowhere", "/metrics"}
	conns := make([]*net.UnixConn, len(paths))
	for i, path := range paths {
		c, err := net.Dial("unix", ts.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c.(*net.UnixConn)
		// Far more than the socket's buffers hold (the smallest answer
		// is some 80 bytes), asked at once, read never. The daemon
		// stops reading the requests as it stops writing: they are
		// sent on their own.
		req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: pmjail\r\n\r\n", path)
		go func() { _, _ = c.Write([]byte(strings.Repeat(req, asked))) }()
	}
	// The daemon gives up on an answer it cannot write, and closes the
	// connection: its end hangs up, seen without reading what it sent.
	deadline := time.Now().Add(answerTimeout + 20*time.Second)
	for i, c := range conns {
		if !hangsUp(t, c, time.Until(deadline)) {
			t.Errorf("GET %s asked %d times and never read: the connection is held after %v", paths[i], asked, answerTimeout+20*time.Second)
		}
	}
}

// hangsUp waits up to d for c's peer to close its end, leaving what it
// sent unread.
func hangsUp(t *testing.T, c *net.UnixConn, d time.Duration) bool {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var revents int16
	deadline := time.Now().Add(d)
	cerr := raw.Control(func(fd uintptr) {
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
			n, err := unix.Poll(fds, int(left.Milliseconds())+1)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				t.Error(err)
				return
			}
			if n > 0 {
				revents = fds[0].Revents
				return
			}
		}
	})
	if cerr != nil {
		t.Fatal(cerr)
	}
	return revents&(unix.POLLRDHUP|unix.POLLHUP) != 0
}
