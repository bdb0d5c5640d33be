package cgroup

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// BenchmarkStats measures one usage read, which the supervisor does every
// ~50 ms per running job.
func BenchmarkStats(b *testing.B) {
	m, err := NewManager()
	if err != nil {
		b.Skip(err)
	}
	j, err := m.Create("bench", &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(64 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(16)},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Delete()
	for b.Loop() {
		if _, err := j.Stats(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCPUTime(b *testing.B) {
	m, err := NewManager()
	if err != nil {
		b.Skip(err)
	}
	j, err := m.Create("bench-cpu", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Delete()
	for b.Loop() {
		if _, err := j.CPUTime(); err != nil {
			b.Fatal(err)
		}
	}
}
