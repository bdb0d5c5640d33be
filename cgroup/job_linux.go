package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/kfile"
)

// Job is one job's cgroup: one directory per controller on v1, a single
// directory on v2.
type Job struct {
	m     *Manager
	name  string
	paths map[string]string // controller (v1) or UnifiedKey (v2) -> dir
	// order is the keys of paths in the order every task joins them
	// (TaskFiles, AddProc); nil for swept orphans, whose order is unknown.
	order []string
	v1    cgroup1.Cgroup   // nil on v2 and for swept orphans
	v2    *cgroup2.Manager // nil on v1 and for swept orphans
	fd    int              // v2: O_PATH fd of the directory, else -1
	// What the host offers this job: copied from a proven Host, or read
	// from the job's own directories when the Manager is lazy.
	swapCapped bool // memory.memsw.* (v1) or memory.swap.max (v2)
	kill       bool // v2 cgroup.kill
	freezer    bool // v1 freezer hierarchy or v2 cgroup.freeze

	mu       sync.Mutex
	deleted  bool
	memSeen  uint64 // highest memory usage seen, when the kernel keeps no peak
	pidsSeen uint64 // highest pids.current seen, when there is no pids.peak
	memPeak  peakFile
	pidsPeak peakFile
}

// peakFile says whether the kernel keeps a peak file (memory.peak on v2,
// pids.peak), learnt at the first read.
type peakFile uint8

const (
	peakUnknown peakFile = iota
	peakKept
	peakNotKept
)

// Name returns the job's cgroup name ("pmjail-<pid>-<id>").
func (j *Job) Name() string { return j.name }

// Paths returns controller -> directory (v1) or UnifiedKey -> directory
// (v2), for the posture and the report.
func (j *Job) Paths() map[string]string {
	out := make(map[string]string, len(j.paths))
	for k, v := range j.paths {
		out[k] = v
	}
	return out
}

// FD returns an O_PATH directory fd of the job's cgroup for
// SysProcAttr.UseCgroupFD/CgroupFD (clone3 CLONE_INTO_CGROUP), which puts
// the child in the job at birth. v2 only; it stays open until Delete.
func (j *Job) FD() (int, bool) {
	if j.fd < 0 {
		return -1, false
	}
	return j.fd, true
}

// newJob returns the Job of cgroup name at paths (filled in as they are
// made), with what a proven host offers it.
func (m *Manager) newJob(name string, paths map[string]string) *Job {
	j := &Job{m: m, name: name, paths: paths, fd: -1}
	if !m.lazy {
		j.swapCapped, j.kill = m.host.SwapCapped, m.host.Kill
		j.freezer = m.host.Has(Freezer)
	}
	return j
}

// learn reads, for a lazy Manager, what the host offers from the job's
// own directories: the files a probe's throwaway child would have shown.
func (j *Job) learn() {
	if !j.m.lazy {
		return
	}
	if dir, ok := j.paths[UnifiedKey]; ok {
		j.swapCapped = j.m.host.Has(Memory) && exists(filepath.Join(dir, swapFileV2))
		j.kill = exists(filepath.Join(dir, killFileV2))
		j.freezer = exists(filepath.Join(dir, freezeFileV2))
		return
	}
	if dir, ok := j.paths[Memory]; ok {
		j.swapCapped = exists(filepath.Join(dir, swapFileV1))
	}
	_, j.freezer = j.paths[Freezer]
}

// mkdir makes one directory of a job's cgroup. For a lazy Manager this is
// the probe: a hierarchy that refuses it is one the probe would have left
// out, and the error wraps ErrNotSupported. A name already taken is never
// that (nor ever a shared cgroup).
func (m *Manager) mkdir(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if err != nil && m.lazy && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %w", err, ErrNotSupported)
	}
	return err
}

// createV1 makes the job's directory in each hierarchy its limits use, or
// in every hierarchy the host has (all: a reserved cgroup, whose limits
// come later).
func (m *Manager) createV1(name string, l limits, all bool) (*Job, error) {
	ctrls := []string{}
	for _, c := range m.host.Controllers {
		// cpu only carries the quota: leave it out when there is none,
		// so that AddProc writes one cgroup.procs fewer.
		if c == CPU && l.cpuQuota == 0 && !all {
			continue
		}
		ctrls = append(ctrls, c)
	}
	j := m.newJob(name, map[string]string{})
	rel := map[string]string{}
	var subs []cgroup1.Subsystem
	for _, c := range ctrls {
		dir := filepath.Join(m.host.Parent[c], name)
		// Mkdir, not the library's MkdirAll: a name already taken is an
		// error, never a shared cgroup.
		if err := m.mkdir(dir); err != nil {
			j.removeDirs()
			return nil, fmt.Errorf("create cgroup %s: %w", name, err)
		}
		j.paths[c] = dir
		j.order = append(j.order, c)
		root := m.host.v1Root[c]
		r, err := filepath.Rel(filepath.Join(root, c), dir)
		if err != nil {
			j.removeDirs()
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		rel[c] = "/" + r
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
		p, ok := rel[string(n)]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return p, nil
	}
	j.learn()
	cg, err := cgroup1.New(path, l.v1(j.swapCapped),
		cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }))
	if err != nil {
		j.removeDirs()
		return nil, fmt.Errorf("create cgroup %s: set limits: %w", name, err)
	}
	j.v1 = cg
	return j, nil
}

func (m *Manager) createV2(name string, l limits) (*Job, error) {
	parent := m.host.Parent[UnifiedKey]
	dir := filepath.Join(parent, name)
	j := m.newJob(name, map[string]string{UnifiedKey: dir})
	j.order = []string{UnifiedKey}
	if err := m.mkdir(dir); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	j.learn()
	// Load, not NewManager: the controllers were enabled for our children
	// once at start-up (enableV2); NewManager would write the parent's
	// cgroup.subtree_control again on every job, under the kernel's global
	// cgroup lock. The mountpoint is our own cgroup, the top it may touch.
	cg, err := cgroup2.Load("/"+name, cgroup2.WithMountpoint(parent))
	if err == nil {
		err = cg.Update(l.v2(j.swapCapped))
	}
	if err != nil {
		j.removeDirs()
		return nil, fmt.Errorf("create cgroup %s: set limits: %w", dir, err)
	}
	j.v2 = cg
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		j.removeDirs()
		return nil, fmt.Errorf("create cgroup %s: %w", dir, os.NewSyscallError("open", err))
	}
	j.fd = fd
	return j, nil
}

// SetLimits gives a reserved cgroup (Manager.Reserve) its job's limits, as
// Create would have: res is validated the same way, and a limit whose
// controller the job lacks is an error wrapping ErrNotSupported.
func (j *Job) SetLimits(res *specs.LinuxResources) error {
	l, err := limitsFrom(res)
	if err != nil {
		return fmt.Errorf("set limits of cgroup %s: %w", j.name, err)
	}
	for _, c := range l.needs() {
		has := j.m.host.Has(c)
		if j.v1 != nil {
			_, has = j.paths[c]
		}
		if !has {
			return fmt.Errorf("set limits of cgroup %s: %s controller: %w", j.name, c, ErrNotSupported)
		}
	}
	switch {
	case j.v1 != nil:
		err = j.v1.Update(l.v1(j.swapCapped))
	case j.v2 != nil:
		err = j.v2.Update(l.v2(j.swapCapped))
	default:
		err = errors.New("job has no live cgroup")
	}
	if err != nil {
		return fmt.Errorf("set limits of cgroup %s: %w", j.name, err)
	}
	return nil
}

// TaskFiles opens the "tasks" file of each of the job's cgroup v1
// hierarchies for writing. A thread that writes "0" to them joins the job;
// the kernel checks the credentials of the opener, so the job's own
// unprivileged init stage can join through files the supervisor opened.
// Unlike a cgroup.procs write for another process, a thread moving itself
// does not wait for an RCU grace period. v2 has no such file.
func (j *Job) TaskFiles() ([]*os.File, error) {
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

// AddProc moves process pid (all its threads) into the job, writing the
// cgroup.procs of each controller the job uses.
func (j *Job) AddProc(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("add pid %d to cgroup %s: invalid pid", pid, j.name)
	}
	var err error
	switch {
	case j.v1 != nil:
		err = j.v1.AddProc(uint64(pid))
	case j.v2 != nil:
		err = j.v2.AddProc(uint64(pid))
	default:
		err = errors.New("job has no live cgroup")
	}
	if err != nil {
		return fmt.Errorf("add pid %d to cgroup %s: %w", pid, j.name, err)
	}
	return nil
}

// procs returns every pid in the job (all controllers, all descendants).
func (j *Job) procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, dir := range j.paths {
		pids, err := readProcs(dir)
		if err != nil {
			return nil, err
		}
		for _, p := range pids {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// Kill kills every task of the job and returns once the job is empty:
// cgroup.kill on v2 when the kernel has it, then freeze, SIGKILL each pid,
// thaw, until no task is left. It does not reap: the caller waits for its
// own child as usual.
//
// Its usual call, after the job's pid 1 was reaped, finds the job empty:
// the kernel ends every task of a pid namespace before its pid 1 can be
// reaped. That takes one read: every task joins the job's hierarchies in
// the job's order (the init stage through TaskFiles, or AddProc) and
// leaves all of them at once when it exits, so the first hierarchy holds
// every task any of them holds. Only a job found busy there is listed in
// every hierarchy and killed.
func (j *Job) Kill() error {
	if len(j.order) > 0 {
		pids, err := readProcs(j.paths[j.order[0]])
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", j.name, err)
		}
		if len(pids) == 0 {
			return nil
		}
	}
	return j.killAll()
}

// killAll kills every task of every hierarchy of the job: cgroup.kill
// where there is one, then freeze, signal and thaw until none is left.
func (j *Job) killAll() error {
	if dir, ok := j.paths[UnifiedKey]; ok && j.kill {
		if err := writeString(filepath.Join(dir, killFileV2), "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("kill cgroup %s: %w", j.name, err)
		}
	}
	deadline := time.Now().Add(killTimeout)
	self := os.Getpid()
	delay := 100 * time.Microsecond
	for {
		pids, err := j.procs()
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", j.name, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill cgroup %s: %d tasks still present after %v", j.name, len(pids), killTimeout)
		}
		frozen := j.freeze(true, time.Now().Add(100*time.Millisecond))
		for _, p := range pids {
			if p == self {
				// Never kill the supervisor, whatever the cgroup says.
				if frozen {
					j.freeze(false, deadline)
				}
				return fmt.Errorf("kill cgroup %s: holds the supervisor itself (pid %d)", j.name, p)
			}
			if err := unix.Kill(p, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				if frozen {
					j.freeze(false, deadline)
				}
				return fmt.Errorf("kill cgroup %s: pid %d: %w", j.name, p, os.NewSyscallError("kill", err))
			}
		}
		if frozen {
			// Frozen tasks act on SIGKILL once thawed.
			j.freeze(false, deadline)
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// freeze freezes (on=true) or thaws the job and reports whether it reached
// that state by deadline. Freezing stops forks between reading the pids and
// signalling them. Without a freezer it returns false.
func (j *Job) freeze(on bool, deadline time.Time) bool {
	var file, value, statePath, want string
	if dir, ok := j.paths[Freezer]; ok {
		// Reading freezer.state is what moves v1 from FREEZING to FROZEN.
		file, statePath = filepath.Join(dir, "freezer.state"), filepath.Join(dir, "freezer.state")
		value, want = "THAWED", "THAWED"
		if on {
			value, want = "FROZEN", "FROZEN"
		}
	} else if dir, ok := j.paths[UnifiedKey]; ok && j.freezer {
		file, statePath = filepath.Join(dir, freezeFileV2), filepath.Join(dir, "cgroup.events")
		value, want = "0", "frozen 0"
		if on {
			value, want = "1", "frozen 1"
		}
	} else {
		return false
	}
	if err := writeString(file, value); err != nil {
		return false
	}
	for {
		s, err := readString(statePath)
		if err != nil {
			return false
		}
		if containsLine(s, want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// Delete kills what is left in the job and removes its cgroup from every
// hierarchy, retrying briefly while the kernel still holds it busy. It is
// idempotent.
//
// It first just removes the directories: cgroupfs refuses to remove a
// cgroup that holds a task or a child cgroup (EBUSY), so a removal is
// itself the proof that the job was empty, as it is after its pid 1 was
// reaped and Kill confirmed it. Only a job that refuses is killed, and
// then removed with its nested cgroups.
func (j *Job) Delete() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.deleted {
		return nil
	}
	if j.removeEmpty() {
		j.deleted = true
		return nil
	}
	if err := j.killAll(); err != nil {
		return fmt.Errorf("delete cgroup %s: %w", j.name, err)
	}
	if err := j.removeDirs(); err != nil {
		return fmt.Errorf("delete cgroup %s: %w", j.name, err)
	}
	j.deleted = true
	return nil
}

// removeEmpty closes the fd and removes each directory of the job that
// the kernel lets go (one already gone counts), and reports whether all
// of them went.
func (j *Job) removeEmpty() bool {
	j.closeFD()
	all := true
	for _, dir := range j.paths {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			all = false
		}
	}
	return all
}

// closeFD closes the v2 directory fd, if open: a cgroup is removed only
// once nothing holds it.
func (j *Job) closeFD() {
	if j.fd >= 0 {
		unix.Close(j.fd)
		j.fd = -1
	}
}

// removeDirs closes the fd and removes every directory of the job.
func (j *Job) removeDirs() error {
	j.closeFD()
	deadline := time.Now().Add(killTimeout)
	var errs []error
	for _, dir := range j.paths {
		if err := removeTree(dir, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// containsLine says whether line is one of s's lines, whole.
func containsLine(s, line string) bool {
	return slices.Contains(strings.Split(s, "\n"), line)
}
