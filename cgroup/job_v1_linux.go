package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/kfile"
)

// This file holds what is particular to cgroup v1, where each controller
// has its own hierarchy and so a job one directory per controller.

// createV1 makes the job's directory in each hierarchy its limits use, or
// in every hierarchy the host has (all: a reserved cgroup, whose limits
// come later).
func (m *Manager) createV1(name string, l limits, all bool) (*Group, error) {
	j := m.newJob(name, map[string]string{})
	for _, c := range m.host.Controllers {
		// cpu only carries the quota: leave it out when there is none,
		// so that AddProc writes one cgroup.procs fewer.
		if c == CPU && l.cpuQuota == 0 && !all {
			continue
		}
		dir := filepath.Join(m.host.Parent[c], name)
		// Mkdir, not the library's MkdirAll: a name already taken is an
		// error, never a shared cgroup.
		if err := m.mkdir(dir); err != nil {
			j.removeDirs()
			return nil, fmt.Errorf("create cgroup %s: %w", name, err)
		}
		j.paths[c] = dir
		j.order = append(j.order, c)
	}
	j.learnV1()
	path, hier, err := m.v1Handle(j.paths)
	if err == nil {
		j.v1, err = cgroup1.New(path, l.v1(j.swapCapped), hier)
	}
	if err != nil {
		j.removeDirs()
		return nil, fmt.Errorf("create cgroup %s: set limits: %w", name, err)
	}
	return j, nil
}

// loadV1 gives a job found on disk (Sweep) the library's handle on the
// hierarchies it has.
func (m *Manager) loadV1(j *Group) error {
	path, hier, err := m.v1Handle(j.paths)
	if err == nil {
		j.v1, err = cgroup1.Load(path, hier)
	}
	return err
}

// v1Handle returns what cgroup1.New and Load need for a job at paths
// (controller -> directory): its path within each hierarchy, and the
// hierarchies themselves, so that the library touches no other.
func (m *Manager) v1Handle(paths map[string]string) (cgroup1.Path, cgroup1.InitOpts, error) {
	rel := map[cgroup1.Name]string{}
	var subs []cgroup1.Subsystem
	for _, c := range v1Controllers {
		dir, ok := paths[c]
		if !ok {
			continue
		}
		root := m.host.v1Root[c]
		r, err := filepath.Rel(filepath.Join(root, c), dir)
		if err != nil {
			return nil, nil, fmt.Errorf("cgroup %s: %w", dir, err)
		}
		rel[cgroup1.Name(c)] = "/" + r
		switch c {
		case Memory:
			subs = append(subs, cgroup1.NewMemory(root))
		case Pids:
			subs = append(subs, cgroup1.NewPids(root))
		case CPU:
			subs = append(subs, cgroup1.NewCpu(root))
		case CPUAcct:
			subs = append(subs, cgroup1.NewCpuacct(root))
		case Freezer:
			subs = append(subs, cgroup1.NewFreezer(root))
		}
	}
	path := func(n cgroup1.Name) (string, error) {
		p, ok := rel[n]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return p, nil
	}
	hier := cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil })
	return path, hier, nil
}

// learnV1 reads, for a lazy Manager, what the host offers from the job's
// own directories, as a probe's throwaway child would have shown it: swap
// accounting in the memory cgroup; a freezer is a hierarchy the job has.
func (j *Group) learnV1() {
	if !j.m.lazy {
		return
	}
	if dir, ok := j.paths[Memory]; ok {
		j.swapCapped = exists(filepath.Join(dir, swapFileV1))
	}
	_, j.freezer = j.paths[Freezer]
}

// TaskFiles opens the "tasks" file of each of the job's cgroup v1
// hierarchies for writing. A thread that writes "0" to them joins the job;
// the kernel checks the credentials of the opener, so the job's own
// unprivileged init stage can join through files the supervisor opened.
// Unlike a cgroup.procs write for another process, a thread moving itself
// does not wait for an RCU grace period. v2 has no such file.
func (j *Group) TaskFiles() ([]*os.File, error) {
	if j.v1 == nil {
		return nil, fmt.Errorf("cgroup %s: task files are a cgroup v1 interface", j.name)
	}
	// One per hierarchy: controllers mounted together share a directory.
	// In the job's order, which AddProc follows too: a task is then in the
	// first hierarchy whenever it is in any of them (see Kill).
	// The directory's identity tells them apart: one stat, where resolving
	// the path's symlinks would take one per component.
	type dirID struct{ dev, ino uint64 }
	seen := map[dirID]bool{}
	var files []*os.File
	for _, c := range j.order {
		dir := j.paths[c]
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("cgroup %s: %w", dir, os.NewSyscallError("stat", err))
		}
		id := dirID{st.Dev, st.Ino}
		if seen[id] {
			continue
		}
		seen[id] = true
		// A bare fd in an os.File: os.OpenFile would register the
		// pollable cgroupfs file with the netpoller (see readFile).
		path := filepath.Join(dir, "tasks")
		fd, err := kfile.Open(path, unix.O_WRONLY)
		if err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("open tasks of cgroup %s: %w", dir, err)
		}
		files = append(files, os.NewFile(uintptr(fd), path))
	}
	return files, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// procsV1 lists the processes of every hierarchy of the job, nested
// cgroups included; a hierarchy whose directory is gone holds none.
func (j *Group) procsV1() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, s := range j.v1.Subsystems() {
		ps, err := j.v1.Processes(s.Name(), true)
		if errors.Is(err, os.ErrNotExist) && !exists(j.paths[string(s.Name())]) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list processes of %s: %w", j.paths[string(s.Name())], err)
		}
		for _, p := range ps {
			if !seen[p.Pid] {
				seen[p.Pid] = true
				out = append(out, p.Pid)
			}
		}
	}
	return out, nil
}

// freezeV1 sets the freezer cgroup dir to FROZEN (on) or THAWED and waits
// for it until deadline. Not the library's Freeze, which waits without
// bound: a task in uninterruptible sleep keeps a cgroup FREEZING.
func freezeV1(dir string, on bool, deadline time.Time) bool {
	state := "THAWED"
	if on {
		state = "FROZEN"
	}
	// Reading freezer.state is what moves v1 from FREEZING to FROZEN.
	file := filepath.Join(dir, "freezer.state")
	return awaitState(file, state, file, state, deadline)
}

// statsV1 reads what a run's result reports: the kernel's memory peak,
// the limit's fail counts (memsw's only where swap accounting exists) and
// OOM kills, CPU time, the tasks' peak and refused forks. Not the
// library's Stat: it reads memory.stat and the usage, peak, failcnt and
// limit of each of memory, memsw, kmem and kmem.tcp, where a result needs
// two of them, and neither pids.peak nor pids.events.
func (j *Group) statsV1(u *Usage) error {
	var r reader
	if dir, ok := j.paths[Memory]; ok {
		u.MemoryPeakBytes, _ = r.single(filepath.Join(dir, "memory.max_usage_in_bytes"), false)
		fail, _ := r.single(filepath.Join(dir, "memory.failcnt"), false)
		var swfail uint64
		if j.swapCapped {
			swfail, _ = r.single(filepath.Join(dir, "memory.memsw.failcnt"), true)
		}
		oom := r.keyed(filepath.Join(dir, "memory.oom_control"), false)
		u.OOMKills = oom["oom_kill"]
		u.MemoryLimitHit = fail > 0 || swfail > 0 || u.OOMKills > 0
	}
	if dir, ok := j.paths[CPUAcct]; ok {
		u.CPUTime = cpuUsageV1(&r, dir)
	}
	if dir, ok := j.paths[Pids]; ok {
		j.readPids(&r, dir, u)
	}
	return r.err
}

// cpuTimeV1 is CPUTime on v1: cpuacct.usage, and pids.current where the
// kernel keeps no pids.peak.
func (j *Group) cpuTimeV1(r *reader) time.Duration {
	var cpu time.Duration
	if dir, ok := j.paths[CPUAcct]; ok {
		cpu = cpuUsageV1(r, dir)
	}
	if dir, ok := j.paths[Pids]; ok && j.pidsPeak != peakKept {
		j.pidsPeakNow(r, dir)
	}
	return cpu
}

// cpuUsageV1 reads cpuacct.usage (nanoseconds).
func cpuUsageV1(r *reader, dir string) time.Duration {
	ns, _ := r.single(filepath.Join(dir, "cpuacct.usage"), false)
	return time.Duration(ns)
}
