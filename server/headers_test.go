package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHeadersBounded is the body attack (TestBodyReadsBounded) moved
// into the headers, which no body-read slot guards: many connections of
// one local user each send most of a megabyte of header lines, and
// stall before the blank line that ends them. net/http held each
// connection's header up to its default MaxHeaderBytes (1 MiB, some
// 2 MiB of heap as parsed) for the ten seconds of readHeaderTimeout, so
// a peer's connections (256 of one uid, 1024 in all by default) held
// GiBs of the daemon's heap. A header over the cap is answered 431 at
// once; one just under it, stalled, holds little.
func TestHeadersBounded(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "prestart": -1}`)
	const conns = 48
	for _, tc := range []struct {
		name     string
		sent     int
		answered bool
	}{
		{"a megabyte", 1 << 20, true},
		{"just under the cap", maxHeaderBytes - 512, false},
	} {
		var head strings.Builder
		head.WriteString("POST /v1/runs HTTP/1.1\r\nHost: pmjail\r\n")
		for i := 0; head.Len() < tc.sent-200; i++ {
			fmt.Fprintf(&head, "X-Pad-%d: %s\r\n", i, strings.Repeat("a", 100))
		}
		payload := []byte(head.String())

		before := heap()
		cs := make([]net.Conn, conns)
		var wg sync.WaitGroup
		for i := range cs {
			c, err := net.Dial("unix", ts.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cs[i] = c
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The write ends when the daemon has read all but a
				// socket buffer of it, or refused it.
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Write(payload)
			}()
		}
		wg.Wait()
		if !tc.answered {
			// Nothing tells when the daemon has read a header that
			// fits a socket buffer: a request on a connection of its
			// own, after the others', is answered once the server
			// has reached it.
			if _, err := ts.c.Health(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		grown := int64(heap()) - int64(before)
		t.Logf("%s: %d stalled headers of %d KiB: the heap grew %d KiB", tc.name, conns, len(payload)>>10, grown>>10)
		if grown > 16<<20 {
			t.Errorf("%s: %d stalled headers of %d KiB grew the heap by %d MiB, want it bounded", tc.name, conns, len(payload)>>10, grown>>20)
		}
		for _, c := range cs {
			if !tc.answered {
				c.Close()
				continue
			}
			// Answered at once, not held for readHeaderTimeout.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("%s: no answer: %v", tc.name, err)
				break
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("%s: %d, want 431", tc.name, resp.StatusCode)
				break
			}
		}
	}
}
