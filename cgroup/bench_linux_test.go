package cgroup

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// BenchmarkStats measures one usage read, which the supervisor does every
// 25 ms per running job with a CPU-time limit.
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

// BenchmarkProbe is what a CLI run pays to find the usable controllers.
func BenchmarkProbe(b *testing.B) {
	for b.Loop() {
		if _, err := Probe(); err != nil {
			b.Skip(err)
		}
	}
}

// BenchmarkCreateDelete is a job cgroup's life without a process in it.
func BenchmarkCreateDelete(b *testing.B) {
	m, err := NewManager()
	if err != nil {
		b.Skip(err)
	}
	q, p := int64(100000), uint64(100000)
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(64 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(16)},
		CPU:    &specs.LinuxCPU{Quota: &q, Period: &p},
	}
	for i := 0; b.Loop(); i++ {
		j, err := m.Create("bench-cycle-"+itoa(i), res)
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Delete(); err != nil {
			b.Fatal(err)
		}
	}
}
