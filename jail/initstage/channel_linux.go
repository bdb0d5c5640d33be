package initstage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/runtimes/layout"
)

// openChannel makes the guest channel (Config.Channel) in the new root and
// puts the host's ends in the report.
func (s *setup) openChannel() error {
	if !s.cfg.Channel {
		return nil
	}
	fds, err := makeChannel(newRootBase, int(s.cfg.Process.User.UID))
	if err != nil {
		return err
	}
	s.report.FDs = append(s.report.FDs, FDChannelIn, FDChannelOut)
	s.report.fds = append(s.report.fds, fds...)
	return nil
}

// makeChannel creates the guest channel's FIFOs in the new root and opens
// their ends: the host's two (returned, to be sent to the supervisor) and a
// writer the guest inherits as fd 3, so that the host reads EOF exactly when
// every guest process is gone, whether or not the guest ever opened the
// path itself.
func makeChannel(root string, guestUID int) ([]int, error) {
	dir := filepath.Join(root, layout.ChannelDir)
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	in, out := filepath.Join(root, layout.ChannelIn), filepath.Join(root, layout.ChannelOut)
	for _, p := range []string{in, out} {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return nil, os.NewSyscallError("mkfifo "+p, err)
		}
		if err := unix.Chown(p, guestUID, guestUID); err != nil {
			return nil, os.NewSyscallError("chown "+p, err)
		}
	}
	// A FIFO's pipe is made by its first open, and the kernel charges its
	// pages to the opener's real uid (pipe->user), whoever grows it later
	// (the supervisor, to 1 MiB). Opened as the guest's, the channel counts
	// against the job's guest id, as the guest's own pipes and its output
	// pipes do (fs.pipe-user-pages-soft): not against the namespace's root
	// id, nor host root's where the job has no user namespace.
	var fds []int
	err := asRealUID(guestUID, func() (err error) {
		fds, err = openChannelEnds(in, out)
		return err
	})
	return fds, err
}

// asRealUID runs fn with the calling thread's real uid uid, its effective
// and saved uids (and so its capabilities and file access) kept, and puts
// the real uid back. The thread is Main's, locked: a real uid not put back
// fails the set-up, and the init stage ends.
func asRealUID(uid int, fn func() error) error {
	ruid, _, _ := unix.Getresuid()
	keep := ^uintptr(0)
	if err := threadSyscall(sysSetresuid, uintptr(uid), keep, keep); err != nil {
		return os.NewSyscallError("setresuid", err)
	}
	err := fn()
	if rerr := threadSyscall(sysSetresuid, uintptr(ruid), keep, keep); rerr != nil {
		return errors.Join(err, os.NewSyscallError("setresuid back", rerr))
	}
	if now, _, _ := unix.Getresuid(); now != ruid {
		return errors.Join(err, fmt.Errorf("real uid %d after restoring %d", now, ruid))
	}
	return err
}

// openChannelEnds opens the channel's FIFOs in and out: the host's ends
// (returned) and the guest's writer, put at ChannelFD.
func openChannelEnds(in, out string) ([]int, error) {
	// O_RDWR opens a FIFO without waiting for a peer.
	hostIn, err := unix.Open(in, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("open channel in", err)
	}
	hostOut, err := unix.Open(out, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("open channel out", err)
	}
	guestOut, err := unix.Open(out, unix.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, os.NewSyscallError("open channel out for the guest", err)
	}
	// dup3 replaces the placeholder the supervisor left at fd 3.
	if err := unix.Dup3(guestOut, ChannelFD, 0); err != nil {
		return nil, os.NewSyscallError("dup3", err)
	}
	unix.Close(guestOut)
	return []int{hostIn, hostOut}, nil
}
