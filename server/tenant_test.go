package server

import (
	"context"
	"errors"
	"github.com/pmjail/pmjail/api"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/profiles"
)

const tenantsConfig = `{"version": 1, "max_concurrency": 4, "max_queue": 8,
	"ceiling": {"limits": {"memory": "512M"}, "runtimes": ["deno", "python"],
		"capabilities": {"request": {"origins": ["https://a.example", "https://b.example"], "max_calls": 50}}},
	"tenants": [
		{"name": "by-group", "match": {"gid": 500}, "ceiling": {"runtimes": ["python"]}},
		{"name": "alice", "match": {"uid": 1001}, "ceiling": {"limits": {"memory": "256M"}},
			"max_concurrency": 1, "max_queue": -1, "rate": "2/min"},
		{"name": "bob", "match": {"uid": 1002}, "ceiling": {"capabilities": {"request": {"origins": ["https://b.example"]}}, "secrets": {}}},
		{"name": "second-group", "match": {"gid": 600}}
	]}`

func mustConfig(t *testing.T, s string) *Config {
	t.Helper()
	c, err := ParseConfig(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testState builds the state a server would from cfg, without a server's
// runtimes: enough to match peers and resolve jobs.
func testState(t *testing.T, cfg *Config) *state {
	t.Helper()
	s := &Server{shares: map[string]*share{}, log: slog.New(slog.DiscardHandler)}
	st, err := s.newState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestTenantMatching(t *testing.T) {
	st := testState(t, mustConfig(t, tenantsConfig))
	for _, tc := range []struct {
		peer Peer
		want string // "" for refused
	}{
		{Peer{UID: 1001, GID: 1001}, "alice"},
		// A uid match wins over a group one, wherever it is listed.
		{Peer{UID: 1001, GID: 500}, "alice"},
		{Peer{UID: 2000, GID: 500}, "by-group"},
		// Supplementary groups count; the first tenant listed wins.
		{Peer{UID: 2000, GID: 2000, Groups: []uint32{600, 500}}, "by-group"},
		{Peer{UID: 2000, GID: 2000, Groups: []uint32{600}}, "second-group"},
		// With tenants and no "others", a peer of no tenant is refused.
		{Peer{UID: 2000, GID: 2000}, ""},
		{Peer{UID: 1001, Err: errors.New("no credentials")}, ""},
	} {
		got := ""
		if tn := st.tenantFor(&tc.peer); tn != nil {
			got = tn.name
		}
		if got != tc.want {
			t.Errorf("peer %+v: tenant %q, want %q", tc.peer, got, tc.want)
		}
	}

	allow := testState(t, mustConfig(t, strings.Replace(tenantsConfig, `"max_concurrency": 4, "max_queue": 8,`, `"max_concurrency": 8, "max_queue": 8, "others": "allow",`, 1)))
	if tn := allow.tenantFor(&Peer{UID: 2000, GID: 2000}); tn == nil || tn.name != othersName || tn.share == nil || tn.share.lim.max != 1 {
		t.Errorf(`others: "allow": a peer of no tenant got %+v, want the global ceiling with a share of 1 slot (7 left by alice, split 4 ways)`, tn)
	}
	// No tenants: everyone is "others", as before tenants existed.
	if tn := testState(t, mustConfig(t, `{"version": 1}`)).tenantFor(&Peer{UID: 2000}); tn == nil || tn.name != othersName {
		t.Errorf("no tenants: %+v, want others", tn)
	}
}

// Each tenant resolves jobs against its own ceiling: what it leaves out is
// the global one's.
func TestTenantCeilings(t *testing.T) {
	st := testState(t, mustConfig(t, tenantsConfig))
	byName := map[string]*tenant{}
	for _, tn := range st.tenants {
		byName[tn.name] = tn
	}
	mem := func(s string) profiles.Limits {
		m, err := profiles.ParseSize(s)
		if err != nil {
			t.Fatal(err)
		}
		return profiles.Limits{Memory: m}
	}
	for _, tc := range []struct {
		tenant string
		req    job.Request
		field  string // "" for accepted
	}{
		{"alice", job.Request{Runtime: "deno", Source: "1", Limits: mem("256M")}, ""},
		{"alice", job.Request{Runtime: "deno", Source: "1", Limits: mem("384M")}, "limits.memory"},
		{"bob", job.Request{Runtime: "deno", Source: "1", Limits: mem("384M")}, ""},
		{"by-group", job.Request{Runtime: "deno", Source: "1"}, "runtime"},
		{"by-group", job.Request{Runtime: "python", Source: "1"}, ""},
		{"bob", job.Request{Runtime: "deno", Source: "1", Capabilities: mustCaps(t, `{"request": {"urls": ["https://a.example"]}}`)}, "capabilities.request.urls[0]"},
		{"alice", job.Request{Runtime: "deno", Source: "1", Capabilities: mustCaps(t, `{"request": {"urls": ["https://a.example"]}}`)}, ""},
	} {
		_, err := job.Resolve(&tc.req, byName[tc.tenant].ceil, false)
		field := ""
		if err != nil {
			_, field = job.Refusal(err)
			if field == "" {
				field = err.Error()
			}
		}
		if field != tc.field {
			t.Errorf("%s: %+v: refused at %q (%v), want %q", tc.tenant, tc.req.Limits, field, err, tc.field)
		}
	}
	if got := byName["bob"].ceil.Broker.MaxCalls; got != 50 {
		t.Errorf("bob's max_calls %d, want the global 50 it leaves out", got)
	}
	if byName["alice"].share.lim.max != 1 || byName["alice"].share.lim.queue != 0 {
		t.Errorf("alice's share %+v, want 1 slot and no queue", byName["alice"].share.lim)
	}
	if l := byName["bob"].share.lim; l.max != 1 || l.queue != 2 {
		t.Errorf("bob's share %d/%d, want 1 slot (the 3 alice leaves, split 3 ways) and a queue of 2", l.max, l.queue)
	}
}

// A tenant's ceiling above the global one, or a bad tenant, is refused
// at load with the field named.
func TestTenantConfigRefusals(t *testing.T) {
	const head = `{"version": 1, "max_concurrency": 2, "max_queue": 4, "ceiling": {"limits": {"memory": "512M"}, "runtimes": ["deno"], "profiles": ["default"], "capabilities": {"log": false, "request": {"origins": ["https://a.example"], "methods": ["GET"]}}}, `
	for _, tc := range []struct{ tenants, want string }{
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"limits": {"memory": "1G"}}}]`, "tenants[0].ceiling.limits.memory: 1G is above the ceiling of 512M"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"runtimes": ["python"]}}]`, "tenants[0].ceiling.runtimes[0]: python is not enabled by the global ceiling"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"profiles": ["default", "strict"]}}]`, `tenants[0].ceiling.profiles[1]: "strict" is not allowed`},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"log": true}}}]`, "tenants[0].ceiling.capabilities.log"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"request": {"origins": ["*"]}}}}]`, "tenants[0].ceiling.capabilities.request.origins"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"request": {"origins": ["https://c.example"]}}}}]`, "tenants[0].ceiling.capabilities.request.origins[0]"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"request": {"origins": ["https://a.example"], "methods": ["POST"]}}}}]`, "tenants[0].ceiling.capabilities.request.methods[0]"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"request": {"origins": ["https://a.example"], "max_calls": 5000}}}}]`, "tenants[0].ceiling.capabilities.request.max_calls: 5000 is above the global ceiling's 1000"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"request": {"origins": ["https://a.example"], "allow_private_addresses": true}}}}]`, "allow_private_addresses"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 3}]`, "tenants[0].max_concurrency: 3 is above the global max_concurrency of 2"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "max_queue": 5}]`, "tenants[0].max_queue: 5 is above the global max_queue of 4"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "rate": "10"}]`, "tenants[0].rate"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "rate": "10/day"}]`, `tenants[0].rate: "10/day": unit "day"`},
		{`"tenants": [{"name": "a", "match": {"uid": 1, "gid": 1}}]`, "tenants[0].match: set exactly one"},
		{`"tenants": [{"name": "a", "match": {}}]`, "tenants[0].match: set exactly one"},
		{`"tenants": [{"name": "a", "match": {"uid": 1}}, {"name": "b", "match": {"uid": 1}}]`, `tenants[1].match: tenant "a" matches the same peers`},
		{`"tenants": [{"name": "a", "match": {"uid": 1}}, {"name": "a", "match": {"uid": 2}}]`, `tenants[1].name: "a" is taken`},
		{`"tenants": [{"name": "others", "match": {"uid": 1}}]`, `tenants[0].name: "others" is taken`},
		{`"tenants": [{"name": "Big Name", "match": {"uid": 1}}]`, `tenants[0].name`},
		// The path to the value, said once (it was "match: user: user:
		// unknown user ...").
		{`"tenants": [{"name": "a", "match": {"group": "no-such-group-pmjail"}}]`, `tenants[0].match.group: unknown group "no-such-group-pmjail"`},
		{`"tenants": [{"name": "a", "match": {"user": "no-such-user-pmjail"}}]`, `tenants[0].match.user: unknown user "no-such-user-pmjail"`},
		{`"tenants": [{"name": "a", "match": {"uid": 1}, "bogus": 1}]`, `tenants[0].bogus: unknown field`},
		{`"others": "maybe"`, `others: "maybe"`},
		{`"others": "refuse"`, `others: "refuse" with no tenants`},
	} {
		_, err := ParseConfig(strings.NewReader(head + tc.tenants + "}"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.tenants, err, tc.want)
		}
	}
	// Narrower than the global ceiling in every way: accepted.
	if _, err := ParseConfig(strings.NewReader(head + `"tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 2, "max_queue": 4,
		"ceiling": {"limits": {"memory": "256M"}, "runtimes": ["deno"], "profiles": ["default"], "mode": "required",
		"capabilities": {"request": {"origins": ["https://a.example"], "methods": ["GET"], "max_calls": 10}}}}]}`)); err != nil {
		t.Errorf("a tenant within the global ceiling: %v", err)
	}
	// A global mode required binds the tenants.
	if _, err := ParseConfig(strings.NewReader(`{"version": 1, "ceiling": {"mode": "required"}, "tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"mode": "auto"}}]}`)); err == nil || !strings.Contains(err.Error(), "tenants[0].ceiling.mode") {
		t.Errorf("a tenant in mode auto under a global required: %v", err)
	}
}

func TestRateBucket(t *testing.T) {
	r, err := parseRate("2/min")
	if err != nil || r.n != 2 || r.per != time.Minute || r.String() != "2/min" {
		t.Fatalf("parseRate: %+v %v", r, err)
	}
	b := newBucket(r)
	t0 := time.Unix(1000, 0)
	for i := range 2 {
		if _, ok := b.take(t0); !ok {
			t.Fatalf("run %d of a 2/min burst refused", i)
		}
	}
	wait, ok := b.take(t0)
	if ok || wait != 30*time.Second {
		t.Errorf("third run at once: ok %v wait %v, want refused for 30s", ok, wait)
	}
	if _, ok := b.take(t0.Add(30 * time.Second)); !ok {
		t.Error("a run 30s later refused: one run refills every 30s")
	}
	if wait, ok := b.take(t0.Add(40 * time.Second)); ok || wait != 20*time.Second {
		t.Errorf("40s: ok %v wait %v, want refused for 20s", ok, wait)
	}
	b.refund()
	if _, ok := b.take(t0.Add(40 * time.Second)); !ok {
		t.Error("a refunded run was not given back")
	}
	// A reload to a lower rate keeps no more than the new count.
	b.set(rate{n: 1, per: time.Hour}, t0.Add(time.Hour))
	if _, ok := b.take(t0.Add(time.Hour)); !ok {
		t.Error("first run after a reload to 1/h refused")
	}
	if _, ok := b.take(t0.Add(time.Hour)); ok {
		t.Error("second run after a reload to 1/h accepted")
	}
	unlimited := newBucket(rate{})
	for range 100 {
		if _, ok := unlimited.take(t0); !ok {
			t.Fatal("no rate refused a run")
		}
	}
}

// A tenant's runs hold a slot of its share and a global one: a full
// share refuses its tenant only.
func TestTenantShares(t *testing.T) {
	s := &Server{shares: map[string]*share{}, lim: newLimiter(2, 0), log: slog.New(slog.DiscardHandler)}
	st, err := s.newState(mustConfig(t, `{"version": 1, "max_concurrency": 2, "max_queue": -1,
		"tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 1, "max_queue": -1}, {"name": "b", "match": {"uid": 2}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := st.tenants[0], st.tenants[1]
	ctx := context.Background()
	relA, err := s.admit(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.admit(ctx, a); !errors.Is(err, errShareFull) {
		t.Errorf("a's second run: %v, want its share full", err)
	}
	relB, err := s.admit(ctx, b)
	if err != nil {
		t.Fatalf("b with a's share full: %v", err)
	}
	// b left max_concurrency out: the one slot a leaves.
	if _, err := s.admit(ctx, b); !errors.Is(err, errShareFull) {
		t.Errorf("b beyond its share: %v, want its share full", err)
	}
	if r, _, _, _ := a.share.lim.stats(); r != 1 {
		t.Errorf("a's share holds %d runs after a refusal, want 1", r)
	}
	relA.release()
	relA.release() // idempotent
	relB.release()
	if r, _, _, _ := s.lim.stats(); r != 0 {
		t.Errorf("%d global slots held after every release", r)
	}

	// A reload keeps the share (and what it holds) and resizes it.
	relA, err = s.admit(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t, `{"version": 1, "max_concurrency": 2, "max_queue": -1,
		"tenants": [{"name": "a", "match": {"uid": 1}, "max_concurrency": 2, "max_queue": -1}]}`)
	st2, err := s.newState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.resizeShares(st2)
	if st2.tenants[0].share != a.share {
		t.Fatal("a reload gave tenant a a new share")
	}
	if r, _, max, _ := a.share.lim.stats(); r != 1 || max != 2 {
		t.Errorf("a's share after reload: %d running of %d, want 1 of 2", r, max)
	}
	if _, gone := s.shares["b"]; gone {
		t.Error("tenant b's share outlived its removal")
	}
	relA.release()
}

// Over the real socket (the test's own uid, 0, as a tenant): the rate is
// answered 429 with Retry-After, the share's bound with 429, and the
// tenant is in the metrics and the logs.
func TestServerTenantRateAndShare(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 2, "max_queue": -1,
		"tenants": [{"name": "root", "match": {"uid": 0}, "max_concurrency": 1, "max_queue": -1, "rate": "2/h"}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	streamDone := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := ts.c.Stream(ctx, &api.Job{Runtime: "deno", Source: `console.log("up"); await new Promise(r => setTimeout(r, 60000))`},
			func(api.Event) { once.Do(func() { close(started) }) })
		streamDone <- err
	}()
	select {
	case <-started:
	case err := <-streamDone:
		t.Fatalf("the slow run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the slow run never started")
	}
	var apiErr *client.Error
	_, err := ts.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `1`})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != codeQueueFull || !strings.Contains(apiErr.Message, "tenant root") {
		t.Fatalf("a run beyond the tenant's share with a global slot free: %v, want 429 naming the tenant", err)
	}
	cancel()
	<-streamDone
	waitFor(t, func() bool { r, _, _, _ := ts.lim.stats(); return r == 0 })

	// The refused run was refunded: one of the two left.
	if res, err := ts.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `1`}); err != nil {
		t.Fatalf("second run of a 2/h rate: %v", err)
	} else if res.Status != "ok" {
		t.Errorf("second run: %s %+v", res.Status, res.Error)
	}
	_, err = ts.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `1`})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != codeRateLimited || apiErr.RetryAfter < 25*time.Minute {
		t.Fatalf("third run of a 2/h rate: %v, want 429 rate_limited with Retry-After about 30 min", err)
	}

	m, err := ts.c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`pmjail_runs_total{runtime="deno",status="ok",tenant="root"} 1`,
		`pmjail_requests_rejected_total{reason="rate_limited"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The slow run ended cancelled, the other ok: both are the tenant's,
	// under their own status.
	if n := counted(t, ts.metrics, "pmjail_run_duration_seconds", map[string]string{"runtime": "deno", "tenant": "root"}); n != 2 {
		t.Errorf("pmjail_run_duration_seconds{runtime=deno,tenant=root}: %v runs, want 2", n)
	}
	waitFor(t, func() bool { return strings.Contains(ts.logs.String(), `"msg":"run answered"`) })
	for _, line := range strings.Split(ts.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"run `) && !strings.Contains(line, `"tenant":"root"`) {
			t.Errorf("a run's log line without its tenant: %s", line)
		}
	}
}

// A reload applies new tenants to the runs that start after it.
func TestServerTenantReload(t *testing.T) {
	ts := startServer(t, `{"version": 1, "ceiling": {"limits": {"memory": "512M"}}}`)
	big := func() *api.Job {
		m, err := api.ParseSize("384M")
		if err != nil {
			t.Fatal(err)
		}
		return &api.Job{Runtime: "deno", Source: "1", Limits: api.Limits{Memory: m}}
	}
	if res, err := ts.c.Run(context.Background(), big()); err != nil || res.Status != "ok" {
		t.Fatalf("before the reload: %v %+v", err, res)
	}
	cfg := mustConfig(t, `{"version": 1, "ceiling": {"limits": {"memory": "512M"}},
		"tenants": [{"name": "small", "match": {"uid": 0}, "ceiling": {"limits": {"memory": "256M"}}}]}`)
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	_, err := ts.c.Run(context.Background(), big())
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Field != "limits.memory" {
		t.Errorf("after a reload into a tenant of 256M: %v, want 400 naming limits.memory", err)
	}
	if err := ts.Reload(mustConfig(t, `{"version": 1, "tenants": [{"name": "other", "match": {"uid": 4242}}]}`)); err != nil {
		t.Fatal(err)
	}
	_, err = ts.c.Run(context.Background(), big())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 403 || apiErr.Code != codeForbidden {
		t.Errorf("after a reload with no tenant for uid 0: %v, want 403", err)
	}
}

// TestTenantReaddedKeepsItsRuns: a reload that took a tenant away
// forgot its share, with the runs still in it; a reload that gave the
// tenant back by name made it a new, empty one, so until the old runs
// ended the tenant ran its share's count again besides them, in global
// slots the other shares are owed. A share with runs in it is kept
// while the tenant is away, and a tenant back by name has it again.
func TestTenantReaddedKeepsItsRuns(t *testing.T) {
	with := `{"version": 1, "max_concurrency": 2, "prestart": -1, "warm": {"deno": 0},
		"tenants": [{"name": "t", "match": {"uid": 4242}, "max_concurrency": 1, "max_queue": 1}]}`
	ts := startServer(t, with)
	held, err := ts.admit(context.Background(), ts.state.Load().tenantNamed("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	if err := ts.Reload(mustConfig(t, `{"version": 1, "max_concurrency": 2, "prestart": -1, "warm": {"deno": 0}}`)); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(mustConfig(t, with)); err != nil {
		t.Fatal(err)
	}
	tn := ts.state.Load().tenantNamed("t")
	if running, _, max, _ := tn.share.lim.stats(); running != 1 || max != 1 {
		t.Errorf("tenant t given back by a reload: %d of its %d slots taken, want its run still there (1)", running, max)
	}
	// Its next run waits for that one, in its queue.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if g, err := ts.admit(ctx, tn); err == nil {
		g.release()
		t.Errorf("tenant t given back, with its one slot's run going: another run admitted at once, want it to wait")
	}
	// Once the old run ends, the share is whole again.
	held.release()
	if g, err := ts.admit(context.Background(), tn); err != nil {
		t.Errorf("tenant t after its old run: %v", err)
	} else {
		g.release()
	}
}
