package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// This file holds what is particular to cgroup v2, the unified hierarchy,
// where a job is a single directory.

// createV2 makes the job's one directory, with the limits l.
func (m *Manager) createV2(name string, l limits) (*Group, error) {
	parent := m.host.Parent[UnifiedKey]
	dir := filepath.Join(parent, name)
	j := m.newJob(name, map[string]string{UnifiedKey: dir})
	j.order = []string{UnifiedKey}
	if err := m.mkdir(dir); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	j.learnV2()
	// Load, not NewManager: the controllers were enabled for our children
	// once at start-up (enableV2); NewManager would write the parent's
	// cgroup.subtree_control again on every job, under the kernel's global
	// cgroup lock.
	err := m.loadV2(j)
	if err == nil {
		err = j.v2.Update(l.v2(j.swapCapped))
	}
	if err != nil {
		j.removeDirs()
		return nil, fmt.Errorf("create cgroup %s: set limits: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		j.removeDirs()
		return nil, fmt.Errorf("create cgroup %s: %w", dir, os.NewSyscallError("open", err))
	}
	j.fd = fd
	return j, nil
}

// loadV2 gives the job the library's handle on its directory. The
// mountpoint is our own cgroup, the top it may touch.
func (m *Manager) loadV2(j *Group) error {
	cg, err := cgroup2.Load("/"+j.name, cgroup2.WithMountpoint(m.host.Parent[UnifiedKey]))
	if err != nil {
		return err
	}
	j.v2 = cg
	return nil
}

// learnV2 reads, for a lazy Manager, what the host offers from the job's
// own directory, as a probe's throwaway child would have shown it: swap
// accounting, cgroup.kill and cgroup.freeze.
func (j *Group) learnV2() {
	if !j.m.lazy {
		return
	}
	dir := j.paths[UnifiedKey]
	j.swapCapped = j.m.host.Has(Memory) && exists(filepath.Join(dir, swapFileV2))
	j.kill = exists(filepath.Join(dir, killFileV2))
	j.freezer = exists(filepath.Join(dir, freezeFileV2))
}

// procsV2 lists the processes of the job and its nested cgroups; a job
// whose directory is gone holds none.
func (j *Group) procsV2() ([]int, error) {
	dir := j.paths[UnifiedKey]
	ps, err := j.v2.Procs(true)
	if errors.Is(err, os.ErrNotExist) && !exists(dir) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list processes of %s: %w", dir, err)
	}
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = int(p)
	}
	return out, nil
}

// freezeV2 sets cgroup.freeze of dir and waits until deadline for
// cgroup.events to say the job reached that state. Not the library's
// Freeze: it reads back cgroup.freeze, the state asked for, and so
// returns before the tasks are frozen.
func freezeV2(dir string, on bool, deadline time.Time) bool {
	value := "0"
	if on {
		value = "1"
	}
	return awaitState(filepath.Join(dir, freezeFileV2), value,
		filepath.Join(dir, "cgroup.events"), "frozen "+value, deadline)
}

// statsV2 reads what a run's result reports: the kernel's memory peak (or
// the highest usage seen), memory events, CPU time, the tasks' peak and
// refused forks. Not the library's Stat: it reads memory.stat, the swap
// and pressure files besides, reports an absent memory.peak as 0, and
// reads neither pids.peak nor pids.events.
func (j *Group) statsV2(dir string, u *Usage) error {
	var r reader
	h := j.m.host
	if h.Has(Memory) {
		u.MemoryPeakBytes = j.memPeakNow(&r, dir)
		ev := r.keyed(filepath.Join(dir, "memory.events"), false)
		u.OOMKills = ev["oom_kill"]
		u.MemoryLimitHit = ev["max"] > 0 || ev["oom"] > 0 || ev["oom_kill"] > 0
	}
	u.CPUTime = cpuStatV2(&r, dir)
	if h.Has(Pids) {
		j.readPids(&r, dir, u)
	}
	return r.err
}

// cpuTimeV2 is CPUTime on v2: cpu.stat, and memory.current and
// pids.current where the kernel keeps no peak of them.
func (j *Group) cpuTimeV2(r *reader, dir string) time.Duration {
	cpu := cpuStatV2(r, dir)
	if j.m.host.Has(Memory) && j.memPeak != peakKept {
		j.memPeakNow(r, dir)
	}
	if j.m.host.Has(Pids) && j.pidsPeak != peakKept {
		j.pidsPeakNow(r, dir)
	}
	return cpu
}

// cpuStatV2 reads usage_usec from cpu.stat, a core file: present without
// the cpu controller.
func cpuStatV2(r *reader, dir string) time.Duration {
	cs := r.keyed(filepath.Join(dir, "cpu.stat"), false)
	return time.Duration(cs["usage_usec"]) * time.Microsecond
}

// memPeakNow is pidsPeakNow for v2 memory (memory.peak is Linux 5.19+).
func (j *Group) memPeakNow(r *reader, dir string) uint64 {
	return peakNow(r, &j.memPeak, &j.memSeen, filepath.Join(dir, "memory.peak"), filepath.Join(dir, "memory.current"))
}
