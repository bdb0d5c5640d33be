package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// A request whose path is not the API's, also one that only a cleaning
// would make one (an empty, "." or ".." segment), or that names no path
// at all, is answered as the API answers: a JSON error naming what was
// asked. net/http's ServeMux answered a path it would clean with a
// redirect (307, an empty body or an HTML one), which a client posting
// a job follows or takes for its answer; "GET *" a bare 400, "OPTIONS
// *" an empty 200, "CONNECT host:port" a plain-text 404.
func TestUncleanPathsAnsweredInJSON(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	for _, tc := range []struct {
		req    string
		status int
		named  string
	}{
		{"POST //v1/runs HTTP/1.1\r\nHost: p\r\nContent-Length: 2\r\n\r\n{}", http.StatusNotFound, "//v1/runs"},
		{"GET /v1/../v1/health HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusNotFound, "/v1/../v1/health"},
		{"GET /v1/./health HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusNotFound, "/v1/./health"},
		{"GET /v1/runs//events HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusNotFound, "/v1/runs//events"},
		{"DELETE /v1/runs/0000000000000000/. HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusNotFound, "/v1/runs/0000000000000000/."},
		{"GET /v1%2fhealth HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusNotFound, "/v1%2fhealth"},
		{"GET * HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusNotFound, "*"},
		{"OPTIONS * HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusNotFound, "*"},
		{"CONNECT p:80 HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusNotFound, "p:80"},
	} {
		resp, err := rawRequest(t, ts.sock, tc.req)
		if err != nil {
			t.Errorf("%.30q: %v", tc.req, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		var eb api.ErrorBody
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &eb) != nil ||
			eb.Error.Code != codeNotFound || !strings.Contains(eb.Error.Message, tc.named) {
			t.Errorf("%.30q: %d %q %q, want %d, a JSON %s naming %q", tc.req, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, codeNotFound, tc.named)
		}
	}
}

// rawRequest sends req, a request as its bytes, on a connection of its
// own to sock and reads the answer's head (its body is the caller's).
// The connection closes with the test.
func rawRequest(t *testing.T, sock, req string) (*http.Response, error) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	return http.ReadResponse(bufio.NewReader(c), nil)
}
