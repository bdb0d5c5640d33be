package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// The example's shape: others allowed beside a tenant ci with 2 of 4
// slots. Peers of no tenant filling every slot they can must leave ci its
// two: others have a share of their own, and the shares fit the global.
func TestOthersCannotStarveTenant(t *testing.T) {
	s := &Server{shares: map[string]*share{}, lim: newLimiter(4, 8), log: slog.New(slog.DiscardHandler)}
	st, err := s.newState(mustConfig(t, `{"version": 1, "max_concurrency": 4, "max_queue": 8, "others": "allow",
		"tenants": [{"name": "ci", "match": {"uid": 1001}, "max_concurrency": 2, "max_queue": 4}]}`))
	if err != nil {
		t.Fatal(err)
	}
	others := st.tenantFor(&Peer{UID: 2000, GID: 2000})
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	// An unmatched peer's flood: every slot it can take at once (a
	// cancelled context takes a free slot but waits for none), then
	// every queue place.
	now, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	for range 100 {
		rel, err := s.admit(now, others)
		if err != nil {
			break
		}
		releases = append(releases, rel.release)
	}
	flood, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rel, err := s.admit(flood, others); err == nil {
				rel.release()
			}
		}()
	}
	waitFor(t, func() bool {
		_, q, _, _ := s.lim.stats()
		oq := 0
		if others.share != nil {
			_, oq, _, _ = others.share.lim.stats()
		}
		return q+oq > 0
	})
	ci := st.tenantFor(&Peer{UID: 1001, GID: 1001})
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rel, err := s.admit(ctx, ci)
		cancel()
		if err != nil {
			t.Fatalf("ci's run %d of its 2 slots with others flooding: %v", i, err)
		}
		releases = append(releases, rel.release)
	}
}

// A tenant that leaves max_concurrency out does not get the whole daemon.
func TestTenantDefaultShareBounded(t *testing.T) {
	cfg := mustConfig(t, `{"version": 1, "max_concurrency": 4, "max_queue": 8,
		"tenants": [{"name": "a", "match": {"uid": 1}}, {"name": "b", "match": {"uid": 2}}]}`)
	sum := 0
	for _, r := range cfg.derived.tenants {
		if r.max >= 4 {
			t.Errorf("tenant %s without max_concurrency: %d slots, the whole daemon", r.name, r.max)
		}
		sum += r.max
	}
	if sum > 4 {
		t.Errorf("default shares sum to %d, above the global 4", sum)
	}
}

// Shares summing above the global, others' included, are refused: no
// tenant's share could be guaranteed.
func TestTenantSharesOverGlobalRefused(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"version": 1, "max_concurrency": 4, "tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 3}, {"name": "b", "match": {"uid": 2}, "max_concurrency": 3}]}`: "max_concurrency",
		`{"version": 1, "max_concurrency": 4, "others": "allow", "others_max_concurrency": 3, "tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 2}]}`:           "others_max_concurrency",
		`{"version": 1, "max_concurrency": 4, "others": "allow", "tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 4}]}`:                                        "others",
		`{"version": 1, "max_concurrency": 2, "tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 2}, {"name": "b", "match": {"uid": 2}}]}`:                       "tenants[1].max_concurrency",
		`{"version": 1, "others_rate": "5/min", "tenants": [{"name": "a", "match": {"uid": 1}}]}`:                                                                               "others_rate",
		`{"version": 1, "others_rate": "5", "others": "allow"}`:                                                                                                                 "others_rate",
	} {
		if _, err := ParseConfig(strings.NewReader(cfg)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", cfg, err, want)
		}
	}
	c := mustConfig(t, `{"version": 1, "max_concurrency": 4, "others": "allow", "others_max_queue": -1, "others_rate": "10/s",
		"tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 1}]}`)
	if o := c.derived.others; o == nil || o.max != 3 || o.queue != 0 || o.rate.n != 10 {
		t.Errorf("others: %+v, want the 3 slots the tenants leave, no queue, 10/s", o)
	}
}

// Others' rate is charged as a tenant's is.
func TestOthersRate(t *testing.T) {
	st := testState(t, mustConfig(t, `{"version": 1, "others_rate": "1/h"}`))
	o := st.tenantFor(&Peer{UID: 2000})
	if o == nil || o.share == nil {
		t.Fatalf("others: %+v, want a share", o)
	}
	if _, ok := o.share.bucket.take(time.Unix(1000, 0)); !ok {
		t.Fatal("others' first run refused")
	}
	if _, ok := o.share.bucket.take(time.Unix(1000, 0)); ok {
		t.Error("others' second run of 1/h allowed")
	}
}

func TestConfigMetricsListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{":9464", "0.0.0.0:9464", "[::]:9464", "192.0.2.1:9464", "example.com:9464"} {
		cfg := `{"version": 1, "metrics": {"listen": "` + addr + `"}}`
		if _, err := ParseConfig(strings.NewReader(cfg)); err == nil || !strings.Contains(err.Error(), "metrics.public") {
			t.Errorf("%s: %v, want refused naming metrics.public", addr, err)
		}
		cfg = `{"version": 1, "metrics": {"listen": "` + addr + `", "public": true}}`
		if _, err := ParseConfig(strings.NewReader(cfg)); err != nil {
			t.Errorf("%s with public: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9464", "127.0.0.2:9464", "[::1]:9464", "localhost:9464"} {
		if _, err := ParseConfig(strings.NewReader(`{"version": 1, "metrics": {"listen": "` + addr + `"}}`)); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

// Over the socket, /metrics and the reload error are the daemon's own
// uid's: another allowed peer gets 403 and a health without the error.
func TestMetricsAndReloadErrorOwnUIDOnly(t *testing.T) {
	ts := startServer(t, `{"version": 1, "allow": {"uids": [4242]},
		"tenants": [{"name": "root", "match": {"uid": 0}, "max_concurrency": 1}, {"name": "t4242", "match": {"uid": 4242}, "max_concurrency": 1}]}`)
	secret := errors.New("config /etc/pmjail/x.json: ceiling.secrets[\"k\"].value_file: open /etc/pmjail/secret-k: no such file")
	_ = ts.ReloadFrom(func() (*Config, error) { return nil, secret })
	get := func(uid uint32, path string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "http://pmjail"+path, nil)
		req = req.WithContext(context.WithValue(req.Context(), peerKey{}, &Peer{UID: uid, GID: uid}))
		rec := httptest.NewRecorder()
		ts.Handler().ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := get(4242, "/metrics"); code != http.StatusForbidden || strings.Contains(body, "t4242") || !strings.Contains(body, "own uid") {
		t.Errorf("/metrics for uid 4242: %d %.300s, want 403 saying only the daemon's own uid", code, body)
	}
	if code, body := get(0, "/metrics"); code != http.StatusOK || !strings.Contains(body, `tenant="t4242"`) {
		t.Errorf("/metrics for the daemon's uid: %d %.300s", code, body)
	}
	code, body := get(4242, "/v1/health")
	var h api.Health
	if err := json.Unmarshal([]byte(body), &h); code != http.StatusOK || err != nil || h.LastReload == nil || h.LastReload.OK || h.LastReload.Error != "" {
		t.Errorf("health for uid 4242: %d %s, want the reload's outcome without its error text", code, body)
	}
	code, body = get(0, "/v1/health")
	if err := json.Unmarshal([]byte(body), &h); code != http.StatusOK || err != nil || h.LastReload == nil || h.LastReload.Error != secret.Error() {
		t.Errorf("health for the daemon's uid: %d %s, want the error", code, body)
	}
}

// A peer whose supplementary groups could not be read is refused when a
// tenant matches by group: it might be that tenant's.
func TestPeerGroupsUnreadRefused(t *testing.T) {
	st := testState(t, mustConfig(t, `{"version": 1, "max_concurrency": 4, "others": "allow",
		"tenants": [{"name": "narrow", "match": {"gid": 500}, "max_concurrency": 1}]}`))
	if tn := st.tenantFor(&Peer{UID: 2000, GID: 2000, GroupsErr: errors.New("getsockopt SO_PEERGROUPS: EINVAL")}); tn != nil {
		t.Errorf("a peer of unknown groups with a tenant matched by group: %s, want refused", tn.name)
	}
	// A uid match does not depend on the groups.
	st = testState(t, mustConfig(t, `{"version": 1, "max_concurrency": 4, "others": "allow",
		"tenants": [{"name": "narrow", "match": {"gid": 500}, "max_concurrency": 1}, {"name": "u", "match": {"uid": 2000}, "max_concurrency": 1}]}`))
	if tn := st.tenantFor(&Peer{UID: 2000, GID: 2000, GroupsErr: errors.New("x")}); tn == nil || tn.name != "u" {
		t.Errorf("a peer matched by uid, groups unread: %+v, want u", tn)
	}
	// No tenant by group: the groups do not matter.
	st = testState(t, mustConfig(t, `{"version": 1, "max_concurrency": 4, "others": "allow", "tenants": [{"name": "u", "match": {"uid": 1}, "max_concurrency": 1}]}`))
	if tn := st.tenantFor(&Peer{UID: 2000, GID: 2000, GroupsErr: errors.New("x")}); tn == nil || tn.name != othersName {
		t.Errorf("groups unread, no group tenant: %+v, want others", tn)
	}
}

// Runs waiting in a tenant's share queue are queued runs.
func TestQueuedCountsShareQueues(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 2,
		"tenants": [{"name": "root", "match": {"uid": 0}, "max_concurrency": 1, "max_queue": 2}]}`)
	tn := ts.state.Load().tenants[0]
	rel, err := ts.admit(context.Background(), tn)
	if err != nil {
		t.Fatal(err)
	}
	defer rel.release()
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { _, err := ts.admit(ctx, tn); waited <- err }()
	waitFor(t, func() bool { _, q, _, _ := tn.share.lim.stats(); return q == 1 })
	h, err := ts.c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h.Queued != 1 {
		t.Errorf("health queued %d, want the 1 run in the tenant's queue", h.Queued)
	}
	if n := counted(t, ts.metrics, "pmjail_runs_queued", nil); n != 1 {
		t.Errorf("pmjail_runs_queued %v, want 1", n)
	}
	cancel()
	<-waited
}

// A tenant's own secret it could never send, and no runtime at all, are
// refused at load.
func TestTenantUnusableCeilingRefused(t *testing.T) {
	const head = `{"version": 1, "ceiling": {"capabilities": {"request": {"origins": ["https://a.example", "https://b.example"]}}}, `
	for tenants, want := range map[string]string{
		`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"request": {"origins": ["https://a.example"]}}, "secrets": {"k": {"value": "v", "origins": ["https://b.example"]}}}}]`: `tenants[0].ceiling.secrets["k"].origins[0]`,
		`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {}, "secrets": {"k": {"value": "v", "origins": ["https://a.example"]}}}}]`:                                              `tenants[0].ceiling.secrets["k"]`,
		`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"runtimes": []}}]`:                                                                                                                      "tenants[0].ceiling.runtimes",
	} {
		if _, err := ParseConfig(strings.NewReader(head + tenants + "}")); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", tenants, err, want)
		}
	}
	if _, err := ParseConfig(strings.NewReader(head + `"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"request": {"origins": ["https://a.example"]}}, "secrets": {"k": {"value": "v", "origins": ["https://a.example"]}}}}]}`)); err != nil {
		t.Errorf("a tenant secret within its origins: %v", err)
	}
}
