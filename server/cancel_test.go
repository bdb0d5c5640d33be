package server

import (
	"testing"

	"github.com/pmjail/pmjail/jail"
)

// counted is pmjail_runs_total for status, as /metrics would show it.
func countedStatus(t *testing.T, s *Server, status jail.Status) float64 {
	t.Helper()
	return counted(t, s.metrics, "pmjail_runs_total", map[string]string{"status": string(status)})
}
