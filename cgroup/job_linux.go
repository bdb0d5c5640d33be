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
)

// Group is one job's cgroup: one directory per controller on v1, a single
// directory on v2.
type Group struct {
	m     *Manager
	name  string
	paths map[string]string // controller (v1) or UnifiedKey (v2) -> dir
	// order is the keys of paths in the order every task joins them
	// (TaskFiles, AddProc); nil for swept orphans, whose order is unknown.
	order []string
	v1    cgroup1.Cgroup   // the library's handle on v1, else nil
	v2    *cgroup2.Manager // the library's handle on v2, else nil
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

// Name returns the job's cgroup name ("pmjail-<pid>-@<start>-<id>").
func (j *Group) Name() string { return j.name }

// Paths returns controller -> directory (v1) or UnifiedKey -> directory
// (v2), for the posture and the report.
func (j *Group) Paths() map[string]string {
	out := make(map[string]string, len(j.paths))
	for k, v := range j.paths {
		out[k] = v
	}
	return out
}

// FD returns an O_PATH directory fd of the job's cgroup for
// SysProcAttr.UseCgroupFD/CgroupFD (clone3 CLONE_INTO_CGROUP), which puts
// the child in the job at birth. v2 only; it stays open until Delete.
func (j *Group) FD() (int, bool) {
	if j.fd < 0 {
		return -1, false
	}
	return j.fd, true
}

// newJob returns the Job of cgroup name at paths (filled in as they are
// made), with what a proven host offers it. A lazy Manager's job learns
// that from its own directories instead (learnV1, learnV2).
func (m *Manager) newJob(name string, paths map[string]string) *Group {
	j := &Group{m: m, name: name, paths: paths, fd: -1}
	if !m.lazy {
		j.swapCapped, j.kill = m.host.SwapCapped, m.host.Kill
		j.freezer = m.host.Has(Freezer)
	}
	return j
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

// SetLimits gives a reserved cgroup (Manager.Reserve) its job's limits, as
// Create would have: res is validated the same way, and a limit whose
// controller the job lacks is an error wrapping ErrNotSupported.
func (j *Group) SetLimits(res *specs.LinuxResources) error {
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

// AddProc moves process pid (all its threads) into the job, writing the
// cgroup.procs of each controller the job uses.
func (j *Group) AddProc(pid int) error {
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

// procs returns every pid in the job (all hierarchies, nested cgroups
// included), listed by the library. A cgroup that is gone holds none.
func (j *Group) procs() ([]int, error) {
	switch {
	case j.v1 != nil:
		return j.procsV1()
	case j.v2 != nil:
		return j.procsV2()
	}
	return nil, errors.New("job has no live cgroup")
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
// every task any of them holds. Only a job found busy there, or with
// nested cgroups, is listed in every hierarchy and killed.
func (j *Group) Kill() error {
	// Not the library's listing here: it walks and stats every file of
	// every hierarchy, where an ended job needs one read.
	if len(j.order) > 0 {
		first := j.paths[j.order[0]]
		if !hasChildren(first) {
			pids, err := readProcsFile(first)
			if err != nil {
				return fmt.Errorf("kill cgroup %s: list processes of %s: %w", j.name, first, err)
			}
			if len(pids) == 0 {
				return nil
			}
		}
	}
	return j.killAll()
}

// killAll kills every task of every hierarchy of the job: cgroup.kill
// where there is one, then freeze, signal and thaw until none is left.
// The signalling is ours: cgroup1 has no kill, and cgroup2's fallback
// waits for the killed processes, reaping the caller's own children.
func (j *Group) killAll() error {
	if j.v2 != nil && j.kill {
		// cgroup.kill written directly: the library's Kill falls back, when
		// that write fails, to waiting for every killed pid, which would
		// reap the supervisor's own child (the job's pid 1) and leave its
		// wait nothing to read.
		if err := writeString(filepath.Join(j.paths[UnifiedKey], killFileV2), "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("kill cgroup %s: %w", j.name, err)
		}
	}
	deadline := time.Now().Add(killTimeout)
	delay := 100 * time.Microsecond
	for {
		pids, err := j.procs()
		switch {
		case errors.Is(err, os.ErrNotExist) && time.Now().Before(deadline):
			// A nested cgroup went while it was listed: list again.
		case err != nil:
			return fmt.Errorf("kill cgroup %s: %w", j.name, err)
		case len(pids) == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("kill cgroup %s: %d tasks still present after %v", j.name, len(pids), killTimeout)
		default:
			if err := j.signal(pids, deadline); err != nil {
				return fmt.Errorf("kill cgroup %s: %w", j.name, err)
			}
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// signal sends SIGKILL to pids with the job frozen, when it can be, so
// that no task forks between the listing and the signals.
func (j *Group) signal(pids []int, deadline time.Time) error {
	self := os.Getpid()
	frozen := j.freeze(true, time.Now().Add(100*time.Millisecond))
	if frozen {
		// Frozen tasks act on SIGKILL once thawed.
		defer j.freeze(false, deadline)
	}
	for _, p := range pids {
		if p == self {
			// Never kill the supervisor, whatever the cgroup says.
			return fmt.Errorf("holds the supervisor itself (pid %d)", p)
		}
		if err := unix.Kill(p, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pid %d: %w", p, os.NewSyscallError("kill", err))
		}
	}
	return nil
}

// freeze freezes (on=true) or thaws the job and reports whether it reached
// that state by deadline. Freezing stops forks between reading the pids and
// signalling them. Without a freezer it returns false.
func (j *Group) freeze(on bool, deadline time.Time) bool {
	if dir, ok := j.paths[Freezer]; ok {
		return freezeV1(dir, on, deadline)
	}
	if dir, ok := j.paths[UnifiedKey]; ok && j.freezer {
		return freezeV2(dir, on, deadline)
	}
	return false
}

// awaitState writes value to file, then reads statePath until it holds
// the line want or deadline passes.
func awaitState(file, value, statePath, want string, deadline time.Time) bool {
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
// then removed with its nested cgroups. Not the library's Delete: it
// lists every hierarchy first, and gives up after five fixed retries
// where a dying job may stay busy longer (killTimeout bounds ours).
func (j *Group) Delete() error {
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
func (j *Group) removeEmpty() bool {
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
func (j *Group) closeFD() {
	if j.fd >= 0 {
		unix.Close(j.fd)
		j.fd = -1
	}
}

// removeDirs closes the fd and removes every directory of the job.
func (j *Group) removeDirs() error {
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
