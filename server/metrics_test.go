package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/posture"
	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/seccomp"
)

func testMetrics() *metrics {
	return newMetrics(func() (int, int) { return 0, 0 }, jail.NewPool(0, jail.PoolOptions{}), nil, "v1.2.3")
}

// series returns the samples of family name whose labels include want,
// by their full label set.
func series(t *testing.T, m *metrics, name string, want map[string]string) map[string]*dto.Metric {
	t.Helper()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.Metric{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			var key []string
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
				key = append(key, l.GetName()+"="+l.GetValue())
			}
			for k, v := range want {
				if labels[k] != v {
					continue samples
				}
			}
			got[strings.Join(key, ",")] = s
		}
	}
	return got
}

// counted sums the counters, or the histograms' counts, of the samples
// series returns: labels a test does not name (a tenant) add up.
func counted(t *testing.T, m *metrics, name string, want map[string]string) float64 {
	t.Helper()
	var n float64
	for _, s := range series(t, m, name, want) {
		switch {
		case s.Counter != nil:
			n += s.GetCounter().GetValue()
		case s.Histogram != nil:
			n += float64(s.GetHistogram().GetSampleCount())
		case s.Gauge != nil:
			n += s.GetGauge().GetValue()
		}
	}
	return n
}

// TestMetricsShowEveryStatus: every run status the jail can report has its
// series from the start, at zero, for each runtime and each tenant, the
// peers of no tenant included.
func TestMetricsShowEveryStatus(t *testing.T) {
	m := testMetrics()
	m.addTenants(&state{tenants: []*tenant{{name: "ci"}}, others: &tenant{name: othersName}})
	for _, tn := range []string{"ci", othersName} {
		for _, rt := range []runtimes.Name{runtimes.Deno, runtimes.Python} {
			for _, s := range jail.Statuses() {
				got := series(t, m, "pmjail_runs_total", map[string]string{"runtime": string(rt), "status": string(s), "tenant": tn})
				if len(got) != 1 {
					t.Errorf("%s %s %s: %d series, want 1", tn, rt, s, len(got))
				}
				for k, v := range got {
					if v.GetCounter().GetValue() != 0 {
						t.Errorf("%s: %v, want 0", k, v.GetCounter().GetValue())
					}
				}
			}
		}
	}
	// No more than those: a tenant's series come from the config alone.
	if got, want := len(series(t, m, "pmjail_runs_total", nil)), 2*2*len(jail.Statuses()); got != want {
		t.Errorf("pmjail_runs_total: %d series, want %d (tenants × runtimes × statuses)", got, want)
	}
}

// A finished run lands in every per-run series under its runtime, status
// and tenant; its denied calls are counted by a bounded name.
func TestMetricsObserveRun(t *testing.T) {
	m := testMetrics()
	res := &jail.Result{Status: jail.StatusOK,
		Usage:  jail.Usage{WallMS: 3, CPUMS: 2, PeakMemoryBytes: 40 << 20},
		Denied: map[string]uint64{"ptrace": 2, "socket": 1, "connect": 4}}
	m.observe(runtimes.Deno, "ci", res, 0.002)
	m.observe(runtimes.Python, othersName, &jail.Result{Status: jail.StatusTimeout}, 0)
	ok := map[string]string{"runtime": "deno", "status": "ok", "tenant": "ci"}
	for _, name := range []string{"pmjail_runs_total", "pmjail_run_duration_seconds", "pmjail_queue_wait_seconds",
		"pmjail_run_cpu_seconds", "pmjail_run_peak_memory_bytes"} {
		if n := counted(t, m, name, ok); n != 1 {
			t.Errorf("%s{runtime=deno,status=ok,tenant=ci}: %v, want 1", name, n)
		}
	}
	timeout := map[string]string{"runtime": "python", "status": "timeout", "tenant": othersName}
	if n := counted(t, m, "pmjail_runs_total", timeout); n != 1 {
		t.Errorf("pmjail_runs_total{python,timeout,others}: %v, want 1", n)
	}
	// No cgroup accounted for the python run's memory: a 0 is unknown,
	// not a tiny run.
	if n := counted(t, m, "pmjail_run_peak_memory_bytes", timeout); n != 0 {
		t.Errorf("peak memory observed for a run without a figure: %v", n)
	}
	// A 3 ms run is told apart from a 1 ms one: the buckets start there.
	for _, s := range series(t, m, "pmjail_run_duration_seconds", ok) {
		b := s.GetHistogram().GetBucket()
		if b[0].GetUpperBound() != 0.001 || b[0].GetCumulativeCount() != 0 {
			t.Errorf("first bucket le=%v holds %d, want le=0.001 holding none", b[0].GetUpperBound(), b[0].GetCumulativeCount())
		}
	}
	if n := counted(t, m, "pmjail_denied_syscalls_total", map[string]string{"syscall": "ptrace"}); n != 2 {
		t.Errorf("denied ptrace: %v, want 2", n)
	}
	if n := counted(t, m, "pmjail_denied_syscalls_total", map[string]string{"syscall": deniedOther}); n != 5 {
		t.Errorf("denied other: %v, want 5 (socket and connect)", n)
	}
}

// However many distinct calls guests are denied, the syscall label takes
// no value outside the dangerous set and "other".
func TestDeniedSyscallsBounded(t *testing.T) {
	m := testMetrics()
	denied := map[string]uint64{}
	for i := range 500 {
		denied["syscall_"+string(rune('a'+i%26))+strings.Repeat("x", i)] = 1
	}
	for _, name := range seccomp.DangerousSyscalls() {
		denied[name] = 1
	}
	m.observe(runtimes.Deno, othersName, &jail.Result{Status: jail.StatusOK, Denied: denied}, 0)
	got := series(t, m, "pmjail_denied_syscalls_total", nil)
	if want := len(seccomp.DangerousSyscalls()) + 1; len(got) != want {
		t.Errorf("%d syscall series, want %d (the dangerous calls and other)", len(got), want)
	}
	if n := counted(t, m, "pmjail_denied_syscalls_total", map[string]string{"syscall": deniedOther}); n != 500 {
		t.Errorf("other: %v, want 500", n)
	}
}

func TestMetricsBuildInfoAndPosture(t *testing.T) {
	m := testMetrics()
	if n := counted(t, m, "pmjail_build_info", map[string]string{"version": "v1.2.3", "go": runtime.Version()}); n != 1 {
		t.Errorf("pmjail_build_info{version=v1.2.3,go=%s}: %v, want 1", runtime.Version(), n)
	}
	m.setPosture(&posture.Report{Layers: []posture.Layer{
		{Name: posture.Seccomp, State: posture.Applied},
		{Name: posture.Rootfs, State: posture.Missing},
		{Name: posture.CgroupMemory, State: posture.Degraded},
	}})
	for layer, want := range map[string]float64{posture.Seccomp: 1, posture.Rootfs: 0, posture.CgroupMemory: 0} {
		got := series(t, m, "pmjail_posture_layer", map[string]string{"layer": layer})
		if len(got) != 1 {
			t.Errorf("layer %s: %d series, want 1", layer, len(got))
		}
		if n := counted(t, m, "pmjail_posture_layer", map[string]string{"layer": layer}); n != want {
			t.Errorf("layer %s: %v, want %v", layer, n, want)
		}
	}
	// A layer proven later turns to 1.
	m.setPosture(&posture.Report{Layers: []posture.Layer{{Name: posture.Rootfs, State: posture.Applied}}})
	if n := counted(t, m, "pmjail_posture_layer", map[string]string{"layer": posture.Rootfs}); n != 1 {
		t.Errorf("rootfs after it applied: %v, want 1", n)
	}
}

// The metrics listener serves /metrics and nothing else: the API is not
// reachable through it, with or without a peer check.
func TestMetricsListenerServesMetricsOnly(t *testing.T) {
	// Registered first, run last: after startServer's Shutdown, which
	// must end ServeMetrics too.
	done := make(chan error, 1)
	t.Cleanup(func() {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeMetrics after Shutdown: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeMetrics still serving 10s after Shutdown")
		}
	})
	ts := startServer(t, `{"version": 1, "metrics": {"listen": "127.0.0.1:0"}}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- ts.ServeMetrics(ln) }()
	base := "http://" + ln.Addr().String()
	get := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{"runtime": "deno", "source": "1"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, body := get(http.MethodGet, "/metrics")
	if status != http.StatusOK || !strings.Contains(body, `pmjail_build_info{go="`+runtime.Version()+`",version="test-version"} 1`) ||
		!strings.Contains(body, "pmjail_runs_total") {
		t.Errorf("GET /metrics: %d\n%.2000s", status, body)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/v1/runs"}, {http.MethodGet, "/v1/runs"}, {http.MethodGet, "/v1/health"},
		{http.MethodGet, "/v1/posture"}, {http.MethodGet, "/"},
		// Not redirected to /metrics (TestUncleanPathsAnsweredInJSON).
		{http.MethodGet, "//metrics"}, {http.MethodGet, "/v1/../metrics"},
	} {
		if status, body := get(r.method, r.path); status != http.StatusNotFound {
			t.Errorf("%s %s on the metrics listener: %d %s, want 404", r.method, r.path, status, body)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// /v1/health tells the last reload's outcome; a refused one is counted.
func TestHealthTellsLastReload(t *testing.T) {
	ts := startServer(t, `{"version": 1}`)
	ctx := context.Background()
	h, err := ts.c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.LastReload != nil {
		t.Errorf("last_reload before any reload: %+v", h.LastReload)
	}
	before := time.Now().UTC()
	refused := errors.New("config /x: max_queue: -5 (want -1 for none, or a count)")
	if err := ts.ReloadFrom(func() (*Config, error) { return nil, refused }); !errors.Is(err, refused) {
		t.Fatalf("ReloadFrom: %v, want %v", err, refused)
	}
	h, err = ts.c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.LastReload; r == nil || r.OK || r.Error != refused.Error() || r.At.Before(before) {
		t.Errorf("last_reload after a refused reload: %+v, want not ok, %q, at or after %v", r, refused, before)
	}
	if n := counted(t, ts.metrics, "pmjail_config_reload_failures_total", nil); n != 1 {
		t.Errorf("reload failures: %v, want 1", n)
	}
	cfg, err := ParseConfig(strings.NewReader(`{"version": 1, "max_queue": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	h, err = ts.c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.LastReload; r == nil || !r.OK || r.Error != "" {
		t.Errorf("last_reload after a reload: %+v, want ok", r)
	}
	if n := counted(t, ts.metrics, "pmjail_config_reload_failures_total", nil); n != 1 {
		t.Errorf("reload failures after a good reload: %v, want still 1", n)
	}
}
