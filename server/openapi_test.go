package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/apicheck"
)

// checkedTransport holds every exchange of a server test to the API's
// OpenAPI document (see apicheck.Doc.Transport); a breach fails t.
func checkedTransport(t *testing.T, rt http.RoundTripper) http.RoundTripper {
	doc, err := apicheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	return doc.Transport(rt, func(err error) { t.Errorf("OpenAPI: %v", err) })
}

// TestServerServesOpenAPI reads the document over the real socket, as a
// client generator would fetch it, and checks it is the built-in one.
func TestServerServesOpenAPI(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	hc := &http.Client{Transport: checkedTransport(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ts.sock)
	}})}
	defer hc.CloseIdleConnections()

	resp, err := hc.Get("http://pmjail/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json: %d %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if !bytes.Equal(body, api.OpenAPI) {
		t.Errorf("served %d bytes, not the built-in document (%d bytes)", len(body), len(api.OpenAPI))
	}
	var doc struct {
		OpenAPI string                     `json:"openapi"`
		Paths   map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("the served document is not JSON: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Paths["/v1/openapi.json"] == nil {
		t.Errorf("document is openapi %q with paths %v; want 3.1.0 naming /v1/openapi.json", doc.OpenAPI, keys(doc.Paths))
	}
	// What a client fetches is usable as it is: its schemas compile.
	served, err := apicheck.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := served.Schema("#/components/schemas/Result"); err != nil {
		t.Errorf("the served document's result schema: %v", err)
	}

	// Only GET, as every read-only endpoint.
	resp, err = hc.Post("http://pmjail/v1/openapi.json", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodGet {
		t.Errorf("POST /v1/openapi.json: %d Allow %q, want 405 Allow GET", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func keys(m map[string]json.RawMessage) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
