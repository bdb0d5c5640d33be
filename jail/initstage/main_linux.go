package initstage

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Main is the init stage: it runs in the job's new namespaces, sets the
// job up (the steps, from the root's mounts to the seccomp filter),
// reports, starts the runtime and stays as its parent (see runRuntime).
// It never returns.
func Main() {
	// Every per-thread attribute (capabilities, no_new_privs, the seccomp
	// filter) must be set on the thread that calls execve. So must the
	// job's cgroups, joined during the set-up (see Join).
	runtime.LockOSThread()
	// The root is built with the modes the set-up names (0755 less this),
	// never its supervisor's umask, which is process-wide: a daemon
	// binding its socket under umask 0777 while a warm runtime started
	// gave that jail a /runtime its guest could not pass (EACCES on exec).
	unix.Umask(0o022)
	// pid 1's signal handlers (see runRuntime) are installed meanwhile: an
	// init stage started ahead of its run waits for its configuration, and
	// with one P each signal is a hand-off between threads (~0.4 ms in
	// all). runRuntime waits for them before it starts the runtime.
	handled := make(chan struct{})
	go func() {
		signal.Notify(make(chan os.Signal, 1), fatalSignals...)
		close(handled)
	}()
	control := os.NewFile(ControlFD, "control")
	var premounted *premountedRoot
	cfg, err := readConfig(newRightsReader(ControlFD, 0), func(p *Premount) { premounted = premountRoot(p) })
	if err != nil {
		// The supervisor is gone or broken; nothing to report to.
		os.Exit(125)
	}
	report, err := setUp(&cfg, premounted, awaitJoin)
	if err != nil {
		report.Error = err.Error()
		var se *stageError
		if errors.As(err, &se) {
			report.Stage, report.Layer = se.stage, se.layer
		}
		report.ExitCode = 125
		// A failed set-up hands over nothing.
		report.FDs, report.fds = nil, nil
		_ = sendReport(control, report)
		os.Exit(125)
	}
	if cfg.AwaitStart {
		// The supervisor counts this process's threads once the report is
		// sent: the signal handlers' thread must be one of them.
		<-handled
	}
	// The id switch cleared the parent-death signal until dropCredentials set
	// it again. A supervisor that died in between has closed its end, so
	// this send fails and no guest starts without one.
	if err := sendReport(control, report); err != nil {
		os.Exit(125)
	}
	if cfg.AwaitStart && !awaitStart() {
		os.Exit(125)
	}
	os.Exit(runRuntime(control, cfg.Process, cfg.Channel, handled))
}

// wait4 waits for any child, as unix.Wait4(-1, ws, 0, nil), but without
// Go's scheduler hearing of it: a blocking system call hands this
// process's one processor to another thread, which Go may have to start,
// and a new thread may be refused (the job's RLIMIT_NPROC counts this
// process's threads by uid, cgroup v2 its tasks), which is fatal. Held
// here, the processor leaves nothing else of this process to run; the
// signals it takes are dropped either way (runRuntime), and a preemption
// signal (Go's monitor asks at most every 10 ms) only restarts the call.
// Preemption signals stay on: with them off (GODEBUG=asyncpreemptoff=1,
// tried) the runtime's Started report came milliseconds late now and then
// (TestPoolUnusedOnCgroupV2 found a short runtime gone before its
// read-back).
func wait4(ws *unix.WaitStatus) (int, error) {
	r, _, errno := unix.RawSyscall6(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(ws)), 0, 0, 0, 0)
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

// awaitStart waits for the supervisor's StartByte (Config.AwaitStart):
// false if anything else comes, or nothing (the supervisor is gone).
func awaitStart() bool {
	var b [1]byte
	for {
		n, err := unix.Read(ControlFD, b[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 1 && b[0] == StartByte
	}
}

// runRuntime starts the runtime as this process's child and stays, as pid
// 1 of the job's pid namespace, until the runtime ends; it returns the
// runtime's exit code, having reported how it ended. Staying is what ties
// the job's life to the supervisor's: this process holds the parent-death
// signal (set by dropCredentials), which the guest cannot clear as it could
// its own, and its death, whatever causes it, makes the kernel kill every
// process of the namespace. It runs nothing of the guest's: the guest's
// ids, capabilities and seccomp filter are already its own (the runtime
// inherits them from this thread, and TSYNC gave the filter to every
// thread), so the policies allow what it does from here: the tasks limit
// (two spare threads, clone; prlimit64 on pid 0, itself), the start
// (pipe2, a vfork-style clone, execve in the child), sendmsg, wait4 and
// exit.
func runRuntime(control *os.File, p *specs.Process, channel bool, handled <-chan struct{}) int {
	files := []uintptr{0, 1, 2}
	if channel {
		files = append(files, ChannelFD)
	}
	// The guest runs as this process's ids and may signal it: pid 1 of a
	// namespace is spared only the signals it leaves at their default, and
	// Go installs handlers, so the signals Go would die of, sent by kill
	// (or as a CLONE_PARENT child's exit signal), are taken here and
	// dropped; Go ignores the others already. Not every signal: taking
	// them all costs a run milliseconds. A channel nobody reads drops them.
	// Main asked for them as it started: they are taken once it is done.
	<-handled
	if err := tasksLimit(p); err != nil {
		_ = sendReport(control, Report{Error: err.Error(), Stage: StageRlimits, ExitCode: 125})
		return 125
	}
	pidfd := -1
	pid, err := syscall.ForkExec(p.Args[0], p.Args, &syscall.ProcAttr{
		Env: p.Env, Files: files, Sys: &syscall.SysProcAttr{PidFD: &pidfd},
	})
	if err != nil {
		code := 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		_ = sendReport(control, Report{Error: fmt.Sprintf("exec %s: %v", p.Args[0], err), Stage: StageExec, ExitCode: code})
		return code
	}
	// The guest's output pipes and channel are the guest's alone: the
	// supervisor reads their EOF when every guest process has gone.
	for _, fd := range files {
		unix.Close(int(fd))
	}
	// The pidfd lets the supervisor read the runtime's own state back.
	if err := sendReport(control, Report{Started: true, FDs: []string{FDRuntime}, fds: []int{pidfd}}); err != nil {
		// The supervisor is gone, and so, by the parent-death signal, is
		// this job.
		return 125
	}
	for {
		var ws unix.WaitStatus
		// Orphans of the guest are this process's to reap too.
		reaped, err := wait4(&ws)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 125
		}
		if reaped != pid {
			continue
		}
		exit := Report{Exited: true, ExitCode: ws.ExitStatus()}
		if ws.Signaled() {
			// pid 1 of a pid namespace cannot die of a signal it sends
			// itself: the signal goes in the report.
			exit.Signal = int(ws.Signal())
			exit.ExitCode = 128 + exit.Signal
		}
		_ = sendReport(control, exit)
		return exit.ExitCode
	}
}

// fatalSignals are those a Go program dies of when kill sends them and it
// has not asked for them (the runtime's sigtable: _SigKill, _SigThrow, and
// _SigPanic, which from kill is no fault to recover from).
var fatalSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGTERM,
	unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGSTKFLT, unix.SIGSYS,
	unix.SIGBUS, unix.SIGFPE, unix.SIGSEGV,
}

// sendReport sends the report and the descriptors it names to the
// supervisor, then closes this side's copies.
func sendReport(control *os.File, report Report) error {
	data, err := report.MarshalBinary()
	if err != nil {
		return err
	}
	if err := SendMessage(int(control.Fd()), data, report.fds); err != nil {
		return err
	}
	for _, fd := range report.fds {
		_ = unix.Close(fd)
	}
	return nil
}
