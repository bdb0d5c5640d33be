package jail

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// The kernel bounds the pipe capacity each user holds
// (fs.pipe-user-pages-soft): it charges a pipe's pages to the user of the
// task that made it (pipe->user, its real uid), and whoever grows the pipe
// later (F_SETPIPE_SZ) grows that user's count, refused only once that
// user is past its budget and the caller is unprivileged. Past it, every
// process of that user without CAP_SYS_RESOURCE or CAP_SYS_ADMIN gets
// 2-page pipes. The supervisor makes the job's output pipes, whose write
// ends are the guest's stdout and stderr: made by root, a guest grew each
// to 1 MiB on root's budget, and a few dozen jobs left the host's root
// services (a hardened systemd unit holds neither capability) crippled
// pipes. So they are made under the job's own uid, whose budget the guest
// spends and which the guest's own pipes count against (see guestPipes).

// guestPipes makes n pipes charged to host uid uid, the job's guest id:
// on an OS thread of its own, locked, whose real uid is uid while it makes
// them (its effective and saved uids stay, and with them its
// capabilities). It returns each pipe's read and write end, as os.Pipe.
// The thread is put back and checked; one that cannot be is never
// unlocked, and runs nothing else: its goroutine waits forever rather
// than end, as Go would then end the thread too, and with it (their
// parent-death signal) the init stages this thread started for earlier
// runs.
func guestPipes(uid, n int) ([][2]*os.File, error) {
	type made struct {
		pipes [][2]*os.File
		err   error
	}
	done := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		ruid, _, _ := unix.Getresuid()
		if err := setRealUID(uid); err != nil {
			runtime.UnlockOSThread()
			done <- made{err: fmt.Errorf("make the pipes as uid %d: %w", uid, err)}
			return
		}
		var m made
		for range n {
			r, w, err := os.Pipe()
			if err != nil {
				m.err = err
				break
			}
			m.pipes = append(m.pipes, [2]*os.File{r, w})
		}
		err := setRealUID(ruid)
		if now, _, _ := unix.Getresuid(); err == nil && now != ruid {
			err = fmt.Errorf("real uid %d after restoring %d", now, ruid)
		}
		if err != nil {
			m.err = errors.Join(m.err, fmt.Errorf("restore the supervisor's real uid: %w", err))
		}
		if m.err != nil {
			for _, p := range m.pipes {
				p[0].Close()
				p[1].Close()
			}
			m.pipes = nil
		}
		done <- m
		if err != nil {
			select {} // locked to this thread for good
		}
		runtime.UnlockOSThread()
	}()
	m := <-done
	return m.pipes, m.err
}

// setRealUID changes the calling thread's real uid only (not Go's
// setresuid, which changes every thread of the process).
func setRealUID(uid int) error {
	if _, _, errno := unix.RawSyscall(sysSetresuid, uintptr(uid), ^uintptr(0), ^uintptr(0)); errno != 0 {
		return os.NewSyscallError("setresuid", errno)
	}
	return nil
}
