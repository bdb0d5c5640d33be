package server

import (
	"net/http"
	"runtime"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/posture"
	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/seccomp"
)

// deniedOther is the syscall label of every denied call outside the
// dangerous set: a guest can make hundreds of distinct calls, and each
// name as a label would be a series of its own.
const deniedOther = "other"

// runLabelNames are the labels of the per-run series; runLabels gives
// their values, in the same order. Adding a label is a change to both.
var runLabelNames = []string{"runtime", "status", "tenant"}

// runLabels are the label values of a finished run of a tenant (its name
// from the config, or "others": never from the request, so the series
// stay bounded).
func runLabels(rt runtimes.Name, status jail.Status, tenant string) []string {
	return []string{string(rt), string(status), tenant}
}

// Histogram buckets. Durations start at 1 ms: a warm Deno hello takes a
// few, and buckets that start above it put every such run in one.
var (
	durationBuckets = prometheus.ExponentialBucketsRange(0.001, 300, 16)
	queueBuckets    = prometheus.ExponentialBucketsRange(0.001, 60, 12)
	cpuBuckets      = prometheus.ExponentialBucketsRange(0.001, 60, 12)
	memoryBuckets   = prometheus.ExponentialBuckets(1<<20, 4, 8) // 1 MiB to 16 GiB
)

// metrics are the daemon's Prometheus series, on a registry of its own so
// that two servers in one process (tests) do not collide.
type metrics struct {
	reg *prometheus.Registry
	// handler serves reg as Prometheus text.
	handler        http.Handler
	runs           *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	queueWait      *prometheus.HistogramVec
	cpu            *prometheus.HistogramVec
	memory         *prometheus.HistogramVec
	denied         *prometheus.CounterVec
	rejected       *prometheus.CounterVec
	posture        *prometheus.GaugeVec
	reloadFailures prometheus.Counter
}

// newMetrics reads the runs in flight and waiting from load.
func newMetrics(load func() (running, queued int), pool *jail.Pool, warm *jail.Warm, version string) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pmjail_runs_total",
			Help: "Runs finished, by runtime, result status and tenant.",
		}, runLabelNames),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pmjail_run_duration_seconds",
			Help:    "Wall-clock time of finished runs, queueing excluded, by runtime, status and tenant.",
			Buckets: durationBuckets,
		}, runLabelNames),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pmjail_queue_wait_seconds",
			Help:    "Time runs waited for a slot, by runtime, status and tenant.",
			Buckets: queueBuckets,
		}, runLabelNames),
		cpu: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pmjail_run_cpu_seconds",
			Help:    "CPU time of finished runs, by runtime, status and tenant.",
			Buckets: cpuBuckets,
		}, runLabelNames),
		memory: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pmjail_run_peak_memory_bytes",
			Help:    "Peak memory of finished runs, by runtime, status and tenant; runs without a cgroup to account for them are not observed.",
			Buckets: memoryBuckets,
		}, runLabelNames),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pmjail_denied_syscalls_total",
			Help: `System calls the seccomp filter refused, by name for the dangerous ones and "other" for the rest.`,
		}, []string{"syscall"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pmjail_requests_rejected_total",
			Help: "Requests refused before a run, by reason (the error code).",
		}, []string{"reason"}),
		posture: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pmjail_posture_layer",
			Help: "1 for each protection layer the host's posture applies, 0 for one it lacks.",
		}, []string{"layer"}),
		reloadFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pmjail_config_reload_failures_total",
			Help: "Config reloads refused; the daemon kept the config it had.",
		}),
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pmjail_build_info",
		Help: "Always 1; the labels say which pmjail and Go built the daemon.",
	}, []string{"version", "go"})
	buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pmjail_runs_in_flight",
		Help: "Runs executing now.",
	}, func() float64 { r, _ := load(); return float64(r) })
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pmjail_runs_queued",
		Help: "Runs waiting for a slot, of a tenant's share or a global one.",
	}, func() float64 { _, q := load(); return float64(q) })
	pooled := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pmjail_init_stages_prestarted",
		Help: "Init stages started ahead of runs, waiting for one.",
	}, func() float64 { return float64(pool.Idle()) })
	warmIdle := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pmjail_warm_runtimes_idle",
		Help: "Runtimes started ahead of runs, each in its whole jail, waiting for a job.",
	}, func() float64 {
		n := 0
		for _, v := range warm.Stats().Idle {
			n += v
		}
		return float64(n)
	})
	warmMemory := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pmjail_warm_runtimes_memory_bytes",
		Help: "Memory the idle warm runtimes' cgroups hold.",
	}, func() float64 { return float64(warm.Stats().MemoryBytes) })
	warmUnready := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pmjail_warm_runtimes_unready_total",
		Help: "Warm runtimes discarded for not saying, in time, that they were ready.",
	}, func() float64 { return float64(warm.Stats().Unready) })
	warmFailed := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pmjail_warm_runtimes_failed_total",
		Help: "Warm runtime starts that failed (each tried again after a wait), the unready ones included.",
	}, func() float64 { return float64(warm.Stats().Failed) })
	m.reg.MustRegister(m.runs, m.duration, m.queueWait, m.cpu, m.memory, m.denied, m.rejected,
		m.posture, m.reloadFailures, buildInfo, inFlight, queued, pooled, warmIdle, warmMemory, warmUnready, warmFailed,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every reason shows from the start, at zero, so that rate() and
	// alerts work before the first occurrence; every runtime's status
	// too, once per tenant (addTenants).
	for _, r := range []string{codeInvalid, codeTooLarge, codeForbidden, codeRefreshForbidden, codeQueueFull, codeRateLimited, codeQueueTimeout, codeDraining, codeBusy} {
		m.rejected.WithLabelValues(r)
	}
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// observe counts a tenant's finished run that waited queued for its
// slot.
func (m *metrics) observe(rt runtimes.Name, tenant string, res *jail.Result, queued float64) {
	l := runLabels(rt, res.Status, tenant)
	m.runs.WithLabelValues(l...).Inc()
	m.duration.WithLabelValues(l...).Observe(float64(res.Usage.WallMS) / 1000)
	m.queueWait.WithLabelValues(l...).Observe(queued)
	m.cpu.WithLabelValues(l...).Observe(float64(res.Usage.CPUMS) / 1000)
	if res.Usage.PeakMemoryBytes > 0 {
		m.memory.WithLabelValues(l...).Observe(float64(res.Usage.PeakMemoryBytes))
	}
	for name, n := range res.Denied {
		m.denied.WithLabelValues(deniedLabel(name)).Add(float64(n))
	}
}

// deniedLabel bounds the syscall label to the dangerous calls, which the
// built-in policies deny whatever the profile, and "other".
func deniedLabel(name string) string {
	if slices.Contains(seccomp.DangerousSyscalls(), name) {
		return name
	}
	return deniedOther
}

// setPosture shows the layers of a posture report: 1 applied, 0 not.
func (m *metrics) setPosture(r *posture.Report) {
	for _, l := range r.Layers {
		v := 0.0
		if l.State == posture.Applied {
			v = 1
		}
		m.posture.WithLabelValues(l.Name).Set(v)
	}
}

// addTenants shows every runtime's status of st's tenants at zero. The
// tenants are the config's, so the series stay bounded; a tenant a
// reload removes keeps its series: its counts stay true.
func (m *metrics) addTenants(st *state) {
	names := []string{}
	for _, t := range st.tenants {
		names = append(names, t.name)
	}
	if st.others != nil {
		names = append(names, st.others.name)
	}
	for _, n := range names {
		for _, rt := range []runtimes.Name{runtimes.Deno, runtimes.Python} {
			for _, s := range jail.Statuses() {
				m.runs.WithLabelValues(runLabels(rt, s, n)...)
			}
		}
	}
}
