package initstage

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/kfile"
)

// What the guest's process keeps: its rlimits, its fds, and no privilege.

// readLastCap reads the highest capability the kernel knows, from the
// host's /proc: the pivot hides it.
func (s *setup) readLastCap() error {
	var err error
	s.lastCap, err = lastCapability()
	return err
}

func lastCapability() (int, error) {
	data, err := kfile.Read("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("parse cap_last_cap: %w", err)
	}
	return n, nil
}

// setRlimits applies the spec's rlimits, but for RLIMIT_NPROC, which it
// only checks: that one is the guest's alone (see tasksLimit).
func (s *setup) setRlimits() error {
	for _, l := range s.cfg.Process.Rlimits {
		res, ok := rlimitNames[l.Type]
		if !ok {
			return fmt.Errorf("unknown rlimit %s", l.Type)
		}
		if res == unix.RLIMIT_NPROC {
			var own unix.Rlimit
			if err := unix.Getrlimit(res, &own); err != nil {
				return os.NewSyscallError("getrlimit "+l.Type, err)
			}
			if l.Soft > l.Hard || l.Hard > own.Max {
				return os.NewSyscallError("setrlimit "+l.Type, unix.EINVAL)
			}
			continue
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: l.Soft, Max: l.Hard}); err != nil {
			return os.NewSyscallError("setrlimit "+l.Type, err)
		}
	}
	return nil
}

// ordinaryPriority gives the runtime, which inherits both from this
// thread, no higher CPU priority and no more protection from the OOM
// killer than an ordinary process has. Both are inherited from the
// supervisor: one started with a negative nice value or oom_score_adj
// (systemd's Nice= and OOMScoreAdjust=, a pod's QoS class) passed them to
// every guest, which then took the CPU ahead of the host's processes and
// outlived them under memory pressure. Raising either needs no privilege;
// a positive value, the operator's, stays. The limits that would let the
// guest take a higher priority back without privilege are an ordinary
// process's too: RLIMIT_NICE (a supervisor started with systemd's
// LimitNICE=, or limits.conf's nice, passed it on, and a guest set its
// own negative nice within it) and RLIMIT_RTPRIO. Lowering them needs no
// privilege either.
func (s *setup) ordinaryPriority() error {
	for _, res := range []int{unix.RLIMIT_NICE, unix.RLIMIT_RTPRIO} {
		if err := unix.Setrlimit(res, &unix.Rlimit{}); err != nil {
			return os.NewSyscallError("setrlimit", err)
		}
	}
	// PRIO_PROCESS with who 0 is the calling thread, the one Main locked
	// and the runtime is forked from. The raw value is 20 - nice.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return os.NewSyscallError("getpriority", err)
	}
	if nice := 20 - prio; nice < 0 {
		if err := unix.Setpriority(unix.PRIO_PROCESS, 0, 0); err != nil {
			return os.NewSyscallError("setpriority", err)
		}
	}
	const oomScoreAdj = "/proc/self/oom_score_adj"
	data, err := kfile.Read(oomScoreAdj)
	if err != nil {
		return err
	}
	adj, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("%s: %w", oomScoreAdj, err)
	}
	if adj >= 0 {
		return nil
	}
	fd, err := kfile.Open(oomScoreAdj, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("0")); err != nil {
		return &os.PathError{Op: "write", Path: oomScoreAdj, Err: err}
	}
	return nil
}

// tasksLimit applies p's RLIMIT_NPROC, if it has one, to this process
// just before it starts the runtime, which inherits it. The limit counts
// tasks by uid, and this process's other threads (the namespace's root
// ids, see dropOtherThreads) count as one: held through the set-up, whose
// blocking calls are where Go starts threads under load, a small bound
// made the init stage's next thread fatal to it. The bound is also the
// guest's hard limit, which nothing here can raise again, so from here
// this process must never need a thread it does not have: past the start
// its blocking calls (the start's own read, the reports' sendmsg; not its
// wait4, see there) still hand its P to another thread, and the threads
// the set-up happened to start were not always idle then. One run in a few hundred of a
// one-task job died so ("failed to create new OS thread", exit 2, the
// guest's output already out), more under load. spareThreads leaves two
// idle first.
func tasksLimit(p *specs.Process) error {
	for _, l := range p.Rlimits {
		if l.Type == "RLIMIT_NPROC" {
			spareThreads(2)
			return os.NewSyscallError("setrlimit "+l.Type, unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: l.Soft, Max: l.Hard}))
		}
	}
	return nil
}

// spareThreads has the Go runtime start n more threads, left idle for its
// scheduler: n goroutines each lock the thread they run on, all at once
// (none can run on a thread locked to another, so each has its own), then
// unlock it and end, and the threads wait for work. With one P (the init
// stage's GOMAXPROCS) a hand-off needs one idle thread at a time.
func spareThreads(n int) {
	ready, release := make(chan struct{}), make(chan struct{})
	var done sync.WaitGroup
	for range n {
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready <- struct{}{}
			<-release
			runtime.UnlockOSThread()
		}()
	}
	for range n {
		<-ready
	}
	close(release)
	done.Wait()
}

var rlimitNames = map[string]int{
	"RLIMIT_CORE":   unix.RLIMIT_CORE,
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE,
	"RLIMIT_FSIZE":  unix.RLIMIT_FSIZE,
	"RLIMIT_CPU":    unix.RLIMIT_CPU,
	"RLIMIT_NPROC":  unix.RLIMIT_NPROC,
	"RLIMIT_STACK":  unix.RLIMIT_STACK,
	"RLIMIT_AS":     unix.RLIMIT_AS,
}

// closeExtraFDs marks every fd above the channel close-on-exec (and the
// channel's placeholder too when there is no channel): the guest inherits
// stdin, stdout, stderr and the channel, nothing else.
func (s *setup) closeExtraFDs() error {
	if err := s.openStdin(); err != nil {
		return err
	}
	first := uint(ControlFD)
	if !s.cfg.Channel {
		first = ChannelFD
	}
	if err := unix.CloseRange(first, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return os.NewSyscallError("close_range", err)
	}
	return nil
}

// openStdin puts the job's standard input (Config.Stdin, a file of the
// read-only root) at fd 0 in place of /dev/null.
func (s *setup) openStdin() error {
	if s.cfg.Stdin == "" {
		return nil
	}
	fd, err := unix.Open(s.cfg.Stdin, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open stdin", Path: s.cfg.Stdin, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Dup3(fd, 0, 0); err != nil {
		return os.NewSyscallError("dup3 stdin", err)
	}
	return nil
}

// Securebits (linux/securebits.h): no capabilities for uid 0 and no
// ambient raise, each locked, and KEEP_CAPS / NO_SETUID_FIXUP locked off.
const lockedSecurebits = 1<<0 | 1<<1 | 1<<3 | 1<<5 | 1<<6 | 1<<7

// dropPrivileges drops every privilege (dropCredentials), then the other
// threads' capabilities (dropOtherThreads).
func (s *setup) dropPrivileges() error {
	unpin := pinThreads()
	defer unpin()
	if err := dropCredentials(s.cfg.Process.User, s.lastCap); err != nil {
		return err
	}
	dropOtherThreads()
	return nil
}

// pinThreads holds every thread of the process on the core this one runs
// on, until unpin gives this thread its own set back (the runtime, started
// from it, inherits that set). dropOtherThreads signals each thread and
// spins in sched_yield until all have answered: a thread woken on the
// other core, behind a busy task there, kept the spinner going for as
// long as a time slice, CPU that a busy daemon's runs need
// (docs/performance.md, "Throughput"); on this core the yield runs it.
// The other threads stay there: they do nothing but the Go runtime's idle
// work while pid 1 waits, and, their ids still the namespace's root, this
// thread may not move them back once it has dropped its own. Best effort:
// without /proc/self/task or getcpu nothing is pinned, and the drop is as
// before, only slower.
func pinThreads() (unpin func()) {
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return func() {}
	}
	var cpu uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return func() {}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return func() {}
	}
	var one unix.CPUSet
	one.Set(int(cpu))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			_ = unix.SchedSetaffinity(tid, &one)
		}
	}
	return func() { _ = unix.SchedSetaffinity(0, &was) }
}

// dropCredentials empties the bounding, ambient and inheritable capability
// sets, switches to the guest's ids, sets no_new_privs, re-arms the parent
// death signal (a credential change clears it) and then checks that nothing
// can be regained.
//
// Every step acts on the calling thread's credentials only, the id changes
// included: setresuid(2) and friends are per-thread system calls, which Go's
// syscall package (and so unix.Setresuid) turns into a signal round trip
// through every runtime thread to keep a Go program's ids uniform. Here one
// thread is enough, and the right one: Main runs the set-up on its locked
// thread and starts the runtime from it (runRuntime), which begins with
// this thread's credentials alone. The process's other threads keep the
// namespace's root ids but never run guest code, nor anything but the Go
// runtime's own work. The checks at the end are on this thread too.
func dropCredentials(user specs.User, lastCap int) error {
	for c := 0; c <= lastCap; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return os.NewSyscallError(fmt.Sprintf("drop bounding capability %d", c), err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return os.NewSyscallError("clear ambient capabilities", err)
	}
	// Without SECBIT_KEEP_CAPS the switch away from uid 0 clears the
	// permitted and effective sets; the locked NOROOT bits keep an exec from
	// granting any back.
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, lockedSecurebits, 0, 0, 0); err != nil {
		return os.NewSyscallError("set securebits", err)
	}
	if err := threadSyscall(sysSetgroups, 0, 0, 0); err != nil {
		return os.NewSyscallError("setgroups", err)
	}
	uid, gid := uintptr(user.UID), uintptr(user.GID)
	if err := threadSyscall(sysSetresgid, gid, gid, gid); err != nil {
		return os.NewSyscallError("setresgid", err)
	}
	if err := threadSyscall(sysSetresuid, uid, uid, uid); err != nil {
		return os.NewSyscallError("setresuid", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capset", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return os.NewSyscallError("set no_new_privs", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return os.NewSyscallError("set parent death signal", err)
	}
	// Trust, but verify: none of this may be undone.
	if threadSyscall(sysSetresuid, 0, 0, 0) == nil {
		return errors.New("regained uid 0 after dropping it")
	}
	if gid != 0 && threadSyscall(sysSetresgid, 0, 0, 0) == nil {
		return errors.New("regained gid 0 after dropping it")
	}
	ruid, euid, suid := unix.Getresuid()
	rgid, egid, sgid := unix.Getresgid()
	if ruid != int(uid) || euid != int(uid) || suid != int(uid) || rgid != int(gid) || egid != int(gid) || sgid != int(gid) {
		return fmt.Errorf("ids %d/%d/%d:%d/%d/%d after the switch, want %d:%d", ruid, euid, suid, rgid, egid, sgid, uid, gid)
	}
	if n, err := unix.Getgroups(); err != nil || len(n) != 0 {
		return fmt.Errorf("supplementary groups %v (%v) after dropping them", n, err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capget", err)
	}
	if data[0].Effective|data[0].Permitted|data[0].Inheritable|data[1].Effective|data[1].Permitted|data[1].Inheritable != 0 {
		return errors.New("capabilities left after dropping them")
	}
	return nil
}

// dropOtherThreads empties the capabilities of the process's other
// threads too: the init stage outlives the set-up as the runtime's parent
// (runRuntime), and its Go runtime's threads, which never run guest code,
// need none. They keep the namespace's root ids, unprivileged on the host
// and no task of the guest's uid (RLIMIT_NPROC counts by uid). Best effort,
// before the seccomp filter (which refuses capset): AllThreadsSyscall
// needs a program built without cgo, as pmjail-init is; a cgo binary
// serving as its own init stage leaves them as they are. On the locked
// thread, whose sets are empty already, the call changes nothing.
func dropOtherThreads() {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	_, _, _ = syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&none[0])), 0)
}

// threadSyscall makes a credential system call on the calling thread alone
// (see dropCredentials).
func threadSyscall(nr, a1, a2, a3 uintptr) error {
	if _, _, errno := unix.RawSyscall(nr, a1, a2, a3); errno != 0 {
		return errno
	}
	return nil
}
