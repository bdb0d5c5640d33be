package integration

import (
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/internal/apicheck"
)

// apiDoc is the API's OpenAPI document, loaded once for the suite.
var apiDoc = sync.OnceValues(apicheck.Load)

// checkedTransport holds every exchange through rt to the OpenAPI
// document (package api): a response whose status, media type or body the
// document does not describe, or a request it refuses that the daemon
// served, fails tb naming the method and path. Benchmarks are left
// unchecked: they measure the daemon, not the checker; so is a run with
// PMJAIL_OPENAPI_CHECK=off (to time the suite without it).
func checkedTransport(tb testing.TB, rt http.RoundTripper) http.RoundTripper {
	if _, bench := tb.(*testing.B); bench || os.Getenv("PMJAIL_OPENAPI_CHECK") == "off" {
		return rt
	}
	doc, err := apiDoc()
	if err != nil {
		tb.Fatal(err)
	}
	return doc.Transport(rt, func(err error) { tb.Errorf("OpenAPI: %v", err) })
}

// checked is client.New(sock) with every exchange checked as above.
func checked(tb testing.TB, sock string) *client.Client {
	return client.New(sock).WithTransport(func(rt http.RoundTripper) http.RoundTripper {
		return checkedTransport(tb, rt)
	})
}

// checkConfig fails tb if the OpenAPI document's schema of the config file
// refuses cfg, a config a daemon started with.
func checkConfig(tb testing.TB, cfg string) {
	tb.Helper()
	doc, err := apiDoc()
	if err != nil {
		tb.Fatal(err)
	}
	if err := doc.Value("#/components/schemas/Config", []byte(cfg)); err != nil {
		tb.Errorf("OpenAPI: the daemon started with a config the document refuses: %v\nconfig: %s", err, cfg)
	}
}
