package integration

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

type testServer struct {
	origin, port string
	hits         atomic.Int64
}

// newTestServer serves /ok, /big (3 MiB) and /redirect (to another origin)
// on 127.0.0.1.
func newTestServer(t *testing.T) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{port: strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}
	s.origin = "http://127.0.0.1:" + s.port
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { s.hits.Add(1); w.Write([]byte("hello from the host")) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(strings.Repeat("x", 3<<20))) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		http.Redirect(w, r, "http://127.0.0.2:"+s.port+"/ok", http.StatusFound)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func jsString(s string) string { return strconv.Quote(s) }
