package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// TestHealthShowsATenantItsOwnCounts: GET /v1/health showed every peer
// the daemon's counts (runs in flight and queued in all, the warm and
// prestarted pools, which runs take from), so one tenant read another's
// activity off it. A peer other than the daemon's own uid sees its own
// tenant's share; the daemon's own uid, the operator, sees the daemon's.
func TestHealthShowsATenantItsOwnCounts(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 3, "max_queue": 6, "allow": {"uids": [4242, 4243]},
		"tenants": [{"name": "a", "match": {"uid": 4242}, "max_concurrency": 1, "max_queue": 2},
		            {"name": "b", "match": {"uid": 4243}, "max_concurrency": 1, "max_queue": 3}]}`)
	get := func(uid uint32) (int, api.Health) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "http://pmjail/v1/health", nil)
		req = req.WithContext(context.WithValue(req.Context(), peerKey{}, &Peer{UID: uid, GID: uid}))
		rec := httptest.NewRecorder()
		ts.Handler().ServeHTTP(rec, req)
		var h api.Health
		if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
			t.Fatalf("health for uid %d: %d %s", uid, rec.Code, rec.Body)
		}
		return rec.Code, h
	}
	// Tenant b has a run in its slot, and one waiting for it.
	b := ts.state.Load().tenantNamed("b")
	held, err := ts.admit(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if g, err := ts.admit(ctx, b); err == nil {
			g.release()
		}
	}()
	waitFor(t, func() bool { _, q, _, _ := b.share.lim.stats(); return q == 1 })

	code, h := get(4242)
	if code != http.StatusOK || h.Scope != api.HealthScopeTenant || h.Tenant != "a" ||
		h.InFlight != 0 || h.Queued != 0 || h.MaxConcurrency != 1 || h.MaxQueue != 2 || h.Warm != nil || h.Pooled != 0 {
		t.Errorf("tenant a's health: %d %+v, want its own share (none in flight or queued, 1 slot, 2 places), no pools", code, h)
	}
	code, h = get(4243)
	if code != http.StatusOK || h.Scope != api.HealthScopeTenant || h.Tenant != "b" ||
		h.InFlight != 1 || h.Queued != 1 || h.MaxConcurrency != 1 || h.MaxQueue != 3 {
		t.Errorf("tenant b's health: %d %+v, want its own share (1 in flight, 1 queued, 1 slot, 3 places)", code, h)
	}
	code, h = get(0)
	if code != http.StatusOK || h.Scope != api.HealthScopeDaemon || h.Tenant != "" ||
		h.InFlight != 1 || h.Queued != 1 || h.MaxConcurrency != 3 || h.MaxQueue != 6 || h.Warm == nil {
		t.Errorf("the daemon's own uid's health: %d %+v, want the daemon's counts", code, h)
	}
}
