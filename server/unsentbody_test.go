package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// A request that declares a body and sends none, to an endpoint that
// reads no body or a POST refused before it reads its own, is answered
// and holds nothing: net/http reads away a body no handler read, before
// the answer's head and after the handler, with no deadline of its own,
// so such a request had no answer and its connection stayed active for
// ever, and a shutdown waited on it for its grace and the cancel wait
// after, and failed.
func TestUnsentBodyHoldsNothing(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	for _, tc := range []struct {
		head   string
		status int
	}{
		{"GET /v1/health HTTP/1.1\r\nHost: pmjail\r\nContent-Length: 10\r\n\r\n", http.StatusOK},
		{"GET /v1/posture HTTP/1.1\r\nHost: pmjail\r\nTransfer-Encoding: chunked\r\n\r\n", http.StatusOK},
		{"GET /v1/runs/0000000000000000/events HTTP/1.1\r\nHost: pmjail\r\nContent-Length: 10\r\n\r\n", http.StatusNotFound},
		{"POST /v1/runs HTTP/1.1\r\nHost: pmjail\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\nContent-Length: 100\r\n\r\n", http.StatusBadRequest},
	} {
		resp, err := rawRequest(t, ts.sock, tc.head)
		if err != nil || resp.StatusCode != tc.status {
			t.Errorf("%.40q, its body never sent: %v %v, want %d", tc.head, resp, err, tc.status)
		}
	}
	// A body that comes is read away and the connection kept: two
	// requests with one each, sent at once, are answered in turn.
	c, err := net.Dial("unix", ts.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	get := "GET /v1/health HTTP/1.1\r\nHost: pmjail\r\nContent-Length: 10\r\n\r\n0123456789"
	if _, err := c.Write([]byte(get + get)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("pipelined request %d with its body: %v %v", i, resp, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	// And the events stream of a request that sent a body follows its
	// run past the deadline its body was read within (net/http clears
	// it once the body is read).
	r, err := ts.c.SubmitAsync(t.Context(), &api.Job{Runtime: "deno",
		Source: fmt.Sprintf(`console.log("a"); await new Promise((r) => setTimeout(r, %d)); console.log("b");`, (unreadBodyTimeout + time.Second).Milliseconds())}, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err = net.Dial("unix", ts.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET /v1/runs/%s/events HTTP/1.1\r\nHost: pmjail\r\nContent-Length: 2\r\n\r\n{}", r.ID); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("events with a body: %v %v", resp, err)
	}
	events, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(events), `"data":"b\n"`) || !strings.Contains(string(events), `"type":"result"`) {
		t.Errorf("events with a body, cut short: %s", events)
	}

	// One more left so, unanswered or not, when the daemon stops.
	c, err = net.Dial("unix", ts.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /v1/health HTTP/1.1\r\nHost: pmjail\r\nContent-Length: 10\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	const grace = 5 * time.Second
	t0 := time.Now()
	err = ts.Shutdown(grace)
	if took := time.Since(t0); err != nil || took >= grace {
		t.Errorf("shutdown with a body unsent: %v after %v, want done within its %v grace", err, took.Round(time.Second), grace)
	}
}
