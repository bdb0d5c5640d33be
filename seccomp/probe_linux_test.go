package seccomp_test

import (
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Probes attempt one call each, in the filtered child, and report the
// errno. Each is harmless if the filter lets it through: mounts target a
// path that does not exist, ptrace attaches to a pid that cannot exist,
// namespaces are created only in the throwaway child.
var probes = map[string]func() error{
	"ptrace_traceme": func() error { return raw(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0) },
	"ptrace_attach":  func() error { return raw(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 0x3ffffffe, 0) },
	"mount": func() error {
		return unix.Mount("none", "/nonexistent-pmjail-target", "tmpfs", 0, "")
	},
	"umount2":       func() error { return unix.Unmount("/nonexistent-pmjail-target", 0) },
	"unshare_newns": func() error { return unix.Unshare(unix.CLONE_NEWNS) },
	"setns":         func() error { return raw(unix.SYS_SETNS, ^uintptr(0), 0, 0) },
	"clone_newuser": func() error { return rawClone(unix.CLONE_NEWUSER | uintptr(unix.SIGCHLD)) },
	"clone_newnet":  func() error { return rawClone(unix.CLONE_NEWNET | uintptr(unix.SIGCHLD)) },
	"clone_plain":   func() error { return rawClone(uintptr(unix.SIGCHLD)) },
	"clone3":        func() error { return raw(unix.SYS_CLONE3, 0, 0, 0) },
	"keyctl": func() error {
		return raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(0) /* thread keyring */, 0)
	},
	"add_key": func() error { return raw(unix.SYS_ADD_KEY, 0, 0, 0) },
	"bpf":     func() error { return raw(unix.SYS_BPF, unix.BPF_PROG_LOAD, 0, 0) },
	"perf_event_open": func() error {
		return raw6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0)
	},
	"userfaultfd":          func() error { return closing(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0) },
	"io_uring_setup":       func() error { return raw(unix.SYS_IO_URING_SETUP, 0, 0, 0) },
	"personality_linux32":  func() error { return raw(unix.SYS_PERSONALITY, 0x0008 /* PER_LINUX32 */, 0, 0) },
	"personality_query":    func() error { return raw(unix.SYS_PERSONALITY, 0xffffffff, 0, 0) },
	"ioctl_tiocsti":        func() error { return ioctlNull(unix.TIOCSTI) },
	"ioctl_tiocsti_hibits": func() error { return ioctlNull(1<<32 | unix.TIOCSTI) },
	"ioctl_tioclinux":      func() error { return ioctlNull(unix.TIOCLINUX) },
	"ioctl_tcgets":         func() error { return ioctlNull(unix.TCGETS) },
	"ioctl_fionread": func() error {
		// A socketpair, not a pipe: the deno profile has no pipe2.
		p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		var n int32
		return raw(unix.SYS_IOCTL, uintptr(p[0]), unix.TIOCINQ /* FIONREAD */, uintptr(unsafe.Pointer(&n)))
	},
	"getsid":  func() error { return raw(unix.SYS_GETSID, 0, 0, 0) },
	"getppid": func() error { return raw(unix.SYS_GETPPID, 0, 0, 0) },
}

func raw(nr, a0, a1, a2 uintptr) error {
	return raw6(nr, a0, a1, a2, 0, 0, 0)
}

func raw6(nr, a0, a1, a2, a3, a4, a5 uintptr) error {
	_, _, errno := unix.RawSyscall6(nr, a0, a1, a2, a3, a4, a5)
	if errno != 0 {
		return errno
	}
	return nil
}

// closing makes a call that returns an fd and closes the fd.
func closing(nr, a0, a1, a2 uintptr) error {
	fd, _, errno := unix.RawSyscall(nr, a0, a1, a2)
	if errno != 0 {
		return errno
	}
	unix.Close(int(fd))
	return nil
}

// rawClone forks with the given flags; a child that gets through exits at
// once, without touching the Go runtime, and is reaped.
func rawClone(flags uintptr) error {
	pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, flags, 0, 0, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, err := unix.Wait4(int(pid), &ws, 0, nil)
	return err
}

func ioctlNull(req uintptr) error {
	fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	c := byte('x')
	return raw(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&c)))
}

// probeAll runs the probes named after "--" in argv, one result per line.
func probeAll(w io.Writer) {
	for _, name := range os.Args[len(os.Args)-countExecArgs():] {
		f, ok := probes[name]
		if !ok {
			fmt.Fprintln(w, name, "unknown-probe")
			continue
		}
		if err := f(); err != nil {
			fmt.Fprintln(w, name, unix.ErrnoName(err.(unix.Errno)))
		} else {
			fmt.Fprintln(w, name, "ok")
		}
	}
}
