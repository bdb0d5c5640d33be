package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pmjail/pmjail/jail"
)

// metrics are the daemon's Prometheus series, on a registry of its own so
// that two servers in one process (tests) do not collide.
type metrics struct {
	reg      *prometheus.Registry
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	rejected *prometheus.CounterVec
}

func newMetrics(lim *limiter, pool *jail.Pool) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pmjail_runs_total",
			Help: "Runs finished, by result status and tenant.",
		}, []string{"status", "tenant"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pmjail_run_duration_seconds",
			Help:    "Wall-clock time of finished runs, queueing excluded, by runtime and tenant.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"runtime", "tenant"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pmjail_requests_rejected_total",
			Help: "Requests refused before a run, by reason (the error code).",
		}, []string{"reason"}),
	}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pmjail_runs_in_flight",
		Help: "Runs executing now.",
	}, func() float64 { r, _, _, _ := lim.stats(); return float64(r) })
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pmjail_runs_queued",
		Help: "Runs waiting for a slot.",
	}, func() float64 { _, q, _, _ := lim.stats(); return float64(q) })
	pooled := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pmjail_init_stages_prestarted",
		Help: "Init stages started ahead of runs, waiting for one.",
	}, func() float64 { return float64(pool.Idle()) })
	m.reg.MustRegister(m.runs, m.duration, m.rejected, inFlight, queued, pooled,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every reason shows from the start, at zero, so that rate() and
	// alerts work before the first occurrence; every status too, once
	// per tenant (addTenants).
	for _, r := range []string{codeInvalid, codeTooLarge, codeForbidden, codeRefreshForbidden, codeQueueFull, codeRateLimited, codeQueueTimeout, codeDraining} {
		m.rejected.WithLabelValues(r)
	}
	return m
}

// addTenants shows every status of st's tenants at zero. A tenant a
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
		for _, s := range jail.Statuses() {
			m.runs.WithLabelValues(string(s), n)
		}
	}
}
