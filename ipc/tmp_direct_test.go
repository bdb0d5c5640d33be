package ipc

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func BenchmarkTmpDirectGet(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr := &http.Transport{Proxy: nil, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for b.Loop() {
		resp, err := c.Get(srv.URL + "/")
		if err != nil {
			b.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
}
