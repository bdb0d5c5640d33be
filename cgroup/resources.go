package cgroup

import (
	"fmt"

	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// defaultCFSPeriod is the kernel's default CFS period, used when a quota is
// given without one.
const defaultCFSPeriod = 100000

// limits is the part of an OCI LinuxResources that pmjail applies.
type limits struct {
	memory    int64 // bytes; 0 = none
	pids      int64 // 0 = none
	cpuQuota  int64 // µs per period; 0 = none
	cpuPeriod uint64
}

// limitsFrom validates res and keeps what pmjail honours: Memory.Limit
// (always without swap, whatever Memory.Swap says), Pids.Limit and
// CPU.Quota/Period. Other fields are ignored.
func limitsFrom(res *specs.LinuxResources) (limits, error) {
	var l limits
	if res == nil {
		return l, nil
	}
	if m := res.Memory; m != nil && m.Limit != nil {
		if *m.Limit <= 0 {
			return l, fmt.Errorf("memory limit %d: must be positive", *m.Limit)
		}
		if m.Swap != nil && *m.Swap != *m.Limit && *m.Swap != 0 {
			return l, fmt.Errorf("memory swap %d: pmjail allows no swap, set Swap equal to Limit", *m.Swap)
		}
		l.memory = *m.Limit
	}
	if p := res.Pids; p != nil && p.Limit != nil {
		if *p.Limit <= 0 {
			return l, fmt.Errorf("pids limit %d: must be positive", *p.Limit)
		}
		l.pids = *p.Limit
	}
	if c := res.CPU; c != nil && c.Quota != nil && *c.Quota > 0 {
		l.cpuQuota = *c.Quota
		l.cpuPeriod = defaultCFSPeriod
		if c.Period != nil && *c.Period > 0 {
			l.cpuPeriod = *c.Period
		}
		if l.cpuQuota < 1000 || l.cpuPeriod < 1000 || l.cpuPeriod > 1000000 {
			return l, fmt.Errorf("cpu quota %d / period %d: quota must be >= 1000 µs and period within 1000..1000000 µs", l.cpuQuota, l.cpuPeriod)
		}
	}
	return l, nil
}

// needs says which controllers the limits require.
func (l limits) needs() []string {
	var c []string
	if l.memory > 0 {
		c = append(c, Memory)
	}
	if l.pids > 0 {
		c = append(c, Pids)
	}
	if l.cpuQuota > 0 {
		c = append(c, CPU)
	}
	return c
}

// v1 returns the resources for containerd's cgroup1 package: the memsw
// limit equals the memory limit (no swap) when memsw exists, and
// swappiness 0 keeps the job's pages out of swap either way.
func (l limits) v1(swapCapped bool) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.memory > 0 {
		limit := l.memory
		swappiness := uint64(0)
		r.Memory = &specs.LinuxMemory{Limit: &limit, Swappiness: &swappiness}
		if swapCapped {
			swap := l.memory
			r.Memory.Swap = &swap
		}
	}
	if l.pids > 0 {
		p := l.pids
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	if l.cpuQuota > 0 {
		q, p := l.cpuQuota, l.cpuPeriod
		r.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	return r
}

// v2 returns the resources for containerd's cgroup2 package: memory.max and
// memory.swap.max = 0 when swap accounting exists.
func (l limits) v2(swapCapped bool) *cgroup2.Resources {
	r := &cgroup2.Resources{}
	if l.memory > 0 {
		limit := l.memory
		r.Memory = &cgroup2.Memory{Max: &limit}
		if swapCapped {
			zero := int64(0)
			r.Memory.Swap = &zero
		}
	}
	if l.pids > 0 {
		r.Pids = &cgroup2.Pids{Max: l.pids}
	}
	if l.cpuQuota > 0 {
		q, p := l.cpuQuota, l.cpuPeriod
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&q, &p)}
	}
	return r
}
