package bpf

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNotSupported means the kernel lacks seccomp filters or a feature the
// program needs (user notification, TSYNC with a listener).
var ErrNotSupported = errors.New("seccomp: not supported by this kernel")

// Install loads p into the calling process with seccomp(2). It is meant for
// the child's init stage: call it on a locked OS thread, after
// PR_SET_NO_NEW_PRIVS (without which an unprivileged caller gets EACCES),
// as the last step before execve. It makes no cgo call and allocates
// little, so it is safe where the child can no longer afford surprises.
//
// TSYNC applies the filter to every thread of the process at once, so no
// Go runtime thread is left unfiltered if the init stage lingers. When
// p.Notify is set the kernel returns a listener fd (close-on-exec), which
// Install returns; otherwise it returns -1.
func Install(p *Program) (listenerFD int, err error) {
	if p == nil || len(p.Filter) == 0 || len(p.Filter) > MaxInsns {
		return -1, errors.New("install seccomp: empty or oversized program")
	}
	prog := unix.SockFprog{Len: uint16(len(p.Filter)), Filter: &p.Filter[0]}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_TSYNC) | uintptr(p.Flags)
	if p.Notify {
		// TSYNC reports a failing thread by returning its id, which would
		// be ambiguous with the listener fd; TSYNC_ESRCH makes it an error.
		flags |= unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH
	}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		err := os.NewSyscallError("seccomp", errno)
		if errno == unix.ENOSYS || errno == unix.EINVAL {
			return -1, errors.Join(ErrNotSupported, err)
		}
		return -1, err
	}
	if !p.Notify {
		if r != 0 {
			// TSYNC without ESRCH: r is the id of a thread that could not
			// be synchronised.
			return -1, os.NewSyscallError("seccomp", unix.ESRCH)
		}
		return -1, nil
	}
	return int(r), nil
}
