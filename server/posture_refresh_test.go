package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// getPosture sends GET /v1/posture?query and returns the status and the
// error code, if any.
func (ts *testServer) getPosture(t *testing.T, query string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ts.sock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://pmjail/v1/posture?" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &eb)
	return resp.StatusCode, eb.Error.Code
}

// A refresh starts probe children: it takes a run slot, and is refused as
// a run is when none is free; reading the posture takes none.
func TestPostureRefreshTakesARunSlot(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "max_queue": -1}`)
	release, err := ts.lim.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if status, code := ts.getPosture(t, "refresh=1"); status != http.StatusTooManyRequests || code != codeQueueFull {
		t.Errorf("a refresh with every slot taken: %d %s, want 429 %s", status, code, codeQueueFull)
	}
	if status, _ := ts.getPosture(t, ""); status != http.StatusOK {
		t.Errorf("reading the posture with every slot taken: %d, want 200", status)
	}
	release()
	if status, code := ts.getPosture(t, "refresh=1"); status != http.StatusOK {
		t.Errorf("a refresh with a slot free: %d %s, want 200", status, code)
	}
	if r, _, _, _ := ts.lim.stats(); r != 0 {
		t.Errorf("%d slots held after the refresh", r)
	}
}
