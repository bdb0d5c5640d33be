package seccomp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// notif and notifResp mirror struct seccomp_notif and seccomp_notif_resp
// from <linux/seccomp.h> (x/sys/unix has the ioctl numbers, not the types).
type notif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

type notifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// NotifyBudget is how many notifications Serve answers for one listener.
// Each one costs the supervisor a wake-up and two ioctls on its own CPU,
// outside the job's cgroup, for a call that costs the guest next to
// nothing: a guest calling a denied syscall in a loop would make the
// supervisor work as hard as itself. Past the budget Serve closes the
// listener; the kernel then fails every call the filter would have
// notified with ENOSYS on its own (still denied, at no cost to the
// supervisor), and Denials reports itself Saturated. A run that is not
// attacking the jail meets a handful of denials, far below it.
const NotifyBudget = 1024

// Serve answers the notifications on listenerFD with EPERM and counts them
// by syscall name, until ctx ends, every filtered task is gone or
// NotifyBudget is spent. It closes listenerFD. Use (*Denials).Serve to
// answer with another errno (a Program's Errno) or to read the counts
// while it runs.
func Serve(ctx context.Context, listenerFD int) *Denials {
	d := &Denials{}
	_ = d.Serve(ctx, listenerFD, unix.EPERM)
	return d
}

// Serve is the notification loop behind the package's Serve. It returns nil
// when ctx ends, the listener hangs up (all filtered tasks exited) or the
// budget is spent (then Saturated reports true), and an error if the
// listener itself fails; it always closes listenerFD. listenerFD must be
// the supervisor's only copy of the listener: closing it is what stops the
// notifications once the budget is spent.
func (d *Denials) Serve(ctx context.Context, listenerFD int, errno unix.Errno) error {
	defer unix.Close(listenerFD)
	if errno == 0 {
		// An answer of 0 is success for a call that never ran: a denial
		// is never answered that way.
		errno = unix.EPERM
	}
	// An eventfd wakes the poll when ctx ends: a blocked NOTIF_RECV cannot
	// be interrupted by closing the fd.
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("serve seccomp notifications: %w", os.NewSyscallError("eventfd", err))
	}
	// The wake-up may run at any time once ctx ends, so the eventfd is
	// closed only when it cannot run any more: a write after the close
	// would land in whatever file reused the number (another job's pipe).
	woke := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(woke)
		one := [8]byte{1}
		_, _ = unix.Write(wake, one[:])
	})
	defer func() {
		if !stop() {
			<-woke
		}
		unix.Close(wake)
	}()

	// Naming a number goes through libseccomp (cgo): once per syscall.
	names := map[int32]string{}
	fds := []unix.PollFd{{Fd: int32(listenerFD), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("serve seccomp notifications: %w", os.NewSyscallError("poll", err))
		}
		if fds[1].Revents != 0 || ctx.Err() != nil {
			return nil
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return nil // no task uses the filter any more
			}
			continue
		}
		var req notif // the kernel insists on a zeroed struct
		if err := ioctl(listenerFD, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			// ENOENT: the task died (or was interrupted) before we read it.
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("serve seccomp notifications: %w", os.NewSyscallError("ioctl SECCOMP_IOCTL_NOTIF_RECV", err))
		}
		name, ok := names[req.nr]
		if !ok {
			name = syscallName(req.nr)
			names[req.nr] = name
		}
		spent := d.add(name) >= NotifyBudget
		resp := notifResp{id: req.id, error: -int32(errno)}
		if err := ioctl(listenerFD, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp)); err != nil &&
			!errors.Is(err, unix.ENOENT) { // the task is gone: nothing to answer
			return fmt.Errorf("serve seccomp notifications: %w", os.NewSyscallError("ioctl SECCOMP_IOCTL_NOTIF_SEND", err))
		}
		if spent {
			d.saturate()
			return nil // the deferred close hands the rest to the kernel
		}
	}
}

func ioctl(fd int, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}
