package netns_test

import (
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/netns"
)

// BenchmarkInspect is the per-run cost of the network check on a child in
// a namespace of its own.
func BenchmarkInspect(b *testing.B) {
	testenv.RequireRoot(b)
	pid := startSleeper(b, syscall.CLONE_NEWNET)
	for b.Loop() {
		if _, err := netns.Inspect(pid); err != nil {
			b.Fatal(err)
		}
	}
}
