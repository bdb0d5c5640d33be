package server

import (
	"testing"

	"github.com/pmjail/pmjail/jail"
)

// TestMetricsShowEveryStatus: every run status the jail can report has its
// series from the start, at zero, for the peers of no tenant too.
func TestMetricsShowEveryStatus(t *testing.T) {
	m := newMetrics(newLimiter(1, 0), jail.NewPool(0, jail.PoolOptions{}))
	m.addTenants(&state{others: &tenant{name: othersName}})
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "pmjail_runs_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "status" {
					got[l.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	statuses := jail.Statuses()
	if len(got) != len(statuses) {
		t.Errorf("pmjail_runs_total series %v, want one per status %v", got, statuses)
	}
	for _, s := range statuses {
		if v, ok := got[string(s)]; !ok || v != 0 {
			t.Errorf("status %s: series present %v, value %v; want present at 0", s, ok, v)
		}
	}
}
