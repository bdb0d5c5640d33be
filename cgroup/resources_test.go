package cgroup

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestLimitsFrom(t *testing.T) {
	l, err := limitsFrom(&specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(64 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(8)},
		CPU:    &specs.LinuxCPU{Quota: i64(50000)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.memory != 64<<20 || l.pids != 8 || l.cpuQuota != 50000 || l.cpuPeriod != defaultCFSPeriod {
		t.Errorf("limits %+v", l)
	}
	if got := l.needs(); len(got) != 3 {
		t.Errorf("needs %v", got)
	}
	if l, err := limitsFrom(nil); err != nil || len(l.needs()) != 0 {
		t.Errorf("nil resources: %+v %v", l, err)
	}
	for name, res := range map[string]*specs.LinuxResources{
		"zero memory":   {Memory: &specs.LinuxMemory{Limit: i64(0)}},
		"swap allowed":  {Memory: &specs.LinuxMemory{Limit: i64(1 << 20), Swap: i64(2 << 20)}},
		"unlimited swp": {Memory: &specs.LinuxMemory{Limit: i64(1 << 20), Swap: i64(-1)}},
		"zero pids":     {Pids: &specs.LinuxPids{Limit: i64(0)}},
		"tiny quota":    {CPU: &specs.LinuxCPU{Quota: i64(10), Period: u64(100000)}},
		"huge period":   {CPU: &specs.LinuxCPU{Quota: i64(10000), Period: u64(10000000)}},
	} {
		if _, err := limitsFrom(res); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

func TestLimitsToLibraries(t *testing.T) {
	l := limits{memory: 64 << 20, pids: 8, cpuQuota: 20000, cpuPeriod: 100000}

	r1 := l.v1(true)
	if *r1.Memory.Limit != 64<<20 || r1.Memory.Swap == nil || *r1.Memory.Swap != 64<<20 || *r1.Memory.Swappiness != 0 {
		t.Errorf("v1 memory %+v", r1.Memory)
	}
	if *r1.Pids.Limit != 8 || *r1.CPU.Quota != 20000 || *r1.CPU.Period != 100000 {
		t.Errorf("v1 pids/cpu %+v %+v", r1.Pids, r1.CPU)
	}
	if r := l.v1(false); r.Memory.Swap != nil {
		t.Error("v1 without memsw must not write memory.memsw.limit_in_bytes")
	}

	r2 := l.v2(true)
	if *r2.Memory.Max != 64<<20 || r2.Memory.Swap == nil || *r2.Memory.Swap != 0 {
		t.Errorf("v2 memory %+v", r2.Memory)
	}
	if r2.Pids.Max != 8 || r2.CPU.Max != "20000 100000" {
		t.Errorf("v2 pids/cpu %+v %+v", r2.Pids, r2.CPU)
	}
	if r := l.v2(false); r.Memory.Swap != nil {
		t.Error("v2 without swap accounting must not write memory.swap.max")
	}
	if r := (limits{}).v2(true); r.Memory != nil || r.Pids != nil || r.CPU != nil {
		t.Errorf("no limits: %+v", r)
	}
}
