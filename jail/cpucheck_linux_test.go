package jail

import (
	"runtime"
	"testing"
	"time"
)

// TestUntilCPULimit: the CPU time is read first when the job could have
// used it at every CPU's rate, never more often than minCPUCheck, and
// every minCPUCheck when the rate is unknown.
func TestUntilCPULimit(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		rate float64
		want time.Duration
	}{
		{10 * time.Second, 2, 5 * time.Second},
		{10 * time.Second, 0.5, 20 * time.Second},
		{30 * time.Millisecond, 2, minCPUCheck},
		{10 * time.Second, 0, minCPUCheck},
	} {
		if got := untilCPULimit(tc.left, tc.rate); got != tc.want {
			t.Errorf("untilCPULimit(%s, %v) = %s, want %s", tc.left, tc.rate, got, tc.want)
		}
	}
	// Every online CPU, at least those this process may use.
	if r := cpuRate(); r < float64(runtime.NumCPU()) {
		t.Errorf("cpuRate() = %v, below this process's %d CPUs", r, runtime.NumCPU())
	}
}
