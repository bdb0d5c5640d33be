package integration

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBrokerEarlyAnswerKeepsTheRun: an origin the request capability
// allows that answers before it has read an upload and closes (as a
// server refusing a body too large does) breaks the connection under the
// broker's write. Once pmjail run caught SIGPIPE as an ending signal
// (for `pmjail run x.js | head -1`), that write's SIGPIPE cancelled the
// whole run (exit 125, "broken pipe signal received"): a guest, or the
// origin, could end a run as if its user had. The request fails, and
// the guest goes on.
func TestBrokerEarlyAnswerKeepsTheRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*net.TCPConn)
			_ = tc.SetReadBuffer(4096)
			// The request's head, not its body.
			r := bufio.NewReaderSize(tc, 16)
			for {
				line, err := r.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
			}
			// The body fills both sides' buffers and the broker's write
			// waits; the answer comes, then the end: a FIN, and the RST of
			// a close with the body unread, which the kernel turns into
			// EPIPE (and SIGPIPE) for the broker's next write.
			time.Sleep(50 * time.Millisecond)
			_, _ = tc.Write([]byte("HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n"))
			_ = tc.CloseWrite()
			time.Sleep(10 * time.Millisecond)
			_ = tc.Close()
		}
	}()
	origin := "http://127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	src := `const body = "x".repeat(3900000);
const r = await host.request.send({ url: "` + origin + `/upload", method: "POST", body });
console.log("after the request", r.ok ? r.value.status : r.error.code);`
	for i := range 3 {
		r := runScript(t, "upload.js", src, "--cap", "request="+origin+":POST")
		if r.Status != "ok" || !strings.Contains(r.Stdout, "after the request") {
			t.Fatalf("run %d: status %s error %+v stdout %q: want the guest to go on after its request", i, r.Status, r.Error, r.Stdout)
		}
	}
}
