package spawn

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Start starts cmd, whose SysProcAttr says how, and reports whether the
// child was born in the cgroup SysProcAttr.CgroupFD names
// (CLONE_INTO_CGROUP). Where clone3, which that needs, is refused (an outer
// seccomp filter, as in Docker's default profile), it starts with clone
// instead and intoCgroup is false: the caller must then move the child
// into its cgroup itself. cmd must not be used again after Start: on that
// fallback the child is started from a copy of it, and cmd.Process may be
// unset.
func Start(cmd *exec.Cmd) (proc *os.Process, intoCgroup bool, err error) {
	proc, err = startOnce(cmd)
	if err != nil && cmd.SysProcAttr.UseCgroupFD && clone3Refusal(err) {
		cmd = restartable(cmd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = false, 0
		proc, err = startOnce(cmd)
	}
	return proc, cmd.SysProcAttr.UseCgroupFD, err
}

// startOnce starts cmd: in a new user namespace through startShared where
// this build has it and clone3 is allowed, else through Go's start, which
// shares memory with any other child already.
func startOnce(cmd *exec.Cmd) (*os.Process, error) {
	if cmd.SysProcAttr.Cloneflags&unix.CLONE_NEWUSER != 0 && canStartShared && !noClone3.Load() {
		proc, err := startShared(cmd)
		if !clone3Refusal(err) {
			return proc, err
		}
		// Remembered, so that later starts go straight to Go's, which uses
		// clone when it has no cgroup to start in.
		noClone3.Store(true)
		if cmd.SysProcAttr.UseCgroupFD {
			return nil, err
		}
	}
	if err := startLocked(cmd); err != nil {
		return nil, err
	}
	return cmd.Process, nil
}

// noClone3: this process was refused clone3 once.
var noClone3 atomic.Bool

// clone3Refusal reports whether err is clone3's refusal (Docker's default
// seccomp profile answers ENOSYS, older ones EPERM), from startShared or
// from Go's start (ENOSYS).
func clone3Refusal(err error) bool {
	var se *os.SyscallError
	if errors.As(err, &se) && se.Syscall == "clone3" {
		return errors.Is(se.Err, unix.ENOSYS) || errors.Is(se.Err, unix.EPERM)
	}
	return errors.Is(err, unix.ENOSYS)
}

// restartable returns a fresh copy of a command whose start failed (an
// exec.Cmd cannot be started twice), sharing its files and attributes.
func restartable(cmd *exec.Cmd) *exec.Cmd {
	attr := *cmd.SysProcAttr
	return &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr, ExtraFiles: cmd.ExtraFiles, SysProcAttr: &attr}
}

// startLocked starts cmd through Go's start from a locked OS thread: the
// parent-death signal fires when the thread that started the child exits,
// so that thread must be one the Go runtime keeps. A new user namespace is
// owned by the host id its root maps to (see ownNamespacesAs).
func startLocked(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	owner, ok := namespaceOwner(cmd.SysProcAttr)
	if !ok {
		defer runtime.UnlockOSThread()
		return cmd.Start()
	}
	restore, err := ownNamespacesAs(owner)
	if err != nil {
		if !errors.Is(err, errThreadTainted) {
			runtime.UnlockOSThread()
		}
		return err
	}
	err = cmd.Start()
	if rerr := restore(); rerr != nil {
		// The thread keeps the job's uid: it stays locked, and ends with
		// this goroutine. The child, if started, goes with it.
		if err == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return errors.Join(err, rerr)
	}
	runtime.UnlockOSThread()
	return err
}
