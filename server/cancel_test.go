package server

import (
	"testing"

	"github.com/pmjail/pmjail/jail"
)

// counted is pmjail_runs_total for status, as /metrics would show it.
func counted(t *testing.T, s *Server, status jail.Status) float64 {
	t.Helper()
	families, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "pmjail_runs_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && l.GetValue() == string(status) {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no pmjail_runs_total series for status %s", status)
	return 0
}
