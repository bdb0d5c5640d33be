package job

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrBindUnreadable marks an exec bind whose source the jail's ids cannot
// use.
var ErrBindUnreadable = errors.New("is not readable by others")

// refuseUnreadable refuses a bind source that the jail's ids, unprivileged
// on the host and in no group of its files, could not use: a directory
// they cannot list and enter (mode o+rx), a file they can neither read nor
// execute. The init stage opens the source with O_PATH, which needs only
// its parents searchable: without this check such a source would be bound
// and be of no use to the program, which would fail on it with a bare
// "permission denied". A parent that others cannot search fails that open,
// and the init stage reports it as the job's bad input. Below the source,
// a file or directory others cannot read is left as it is, as it is on the
// host (/etc holds shadow). flag and spec name the bind in errors, as the
// job gave it.
func refuseUnreadable(flag, spec, src string) error {
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return nil // the init stage says what is missing
	}
	st, err := os.Stat(root)
	if err != nil {
		return nil
	}
	perm := st.Mode().Perm()
	usable := perm&0o004 != 0 || perm&0o001 != 0
	if st.IsDir() {
		usable = perm&0o005 == 0o005
	}
	if usable {
		return nil
	}
	return fmt.Errorf("%w: %s %q: %s %w (mode %04o): the jail's ids are unprivileged on the host",
		ErrInvalid, flag, spec, root, ErrBindUnreadable, perm)
}

// ErrBindSocket and ErrBindFIFO mark an exec bind whose source is or holds
// a Unix socket or a named pipe: a channel to a host process.
var (
	ErrBindSocket = errors.New("is a socket")
	ErrBindFIFO   = errors.New("is a named pipe")
)

// refuseChannels refuses a bind source that is, or holds below it, a Unix
// socket or a named pipe. A pathname socket is reached through the file
// system, not the network: neither the job's empty network namespace nor a
// read-only mount stops connect(), which needs only write permission on
// the socket file, and many services make theirs writable by anyone.
// (Abstract sockets are the network namespace's own: the job's holds none
// of the host's.) A read-only mount does not stop writing to a named pipe
// either. Landlock refuses writing to a pipe, and from ABI 9 connecting to
// a socket made outside the job, where the kernel has it and the profile
// asks for it; this check holds without. It sees the tree as it is at
// set-up: a socket or pipe a host process makes there later is not refused.
//
// The walk does not follow symbolic links below src (the jail resolves them
// within its own root) but crosses mount points (a bind is recursive). A
// src that cannot be resolved is left to the init stage, which reports it
// as the job's bad input with the reason; a tree that cannot be read in
// full is refused. flag and spec name the bind in errors, as the job gave
// it.
func refuseChannels(flag, spec, src string) error {
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return nil
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != root && errors.Is(err, fs.ErrNotExist) {
				return nil // gone since its directory was read
			}
			return err
		}
		var what error
		switch {
		case d.Type()&fs.ModeSocket != 0:
			what = ErrBindSocket
		case d.Type()&fs.ModeNamedPipe != 0:
			what = ErrBindFIFO
		default:
			return nil
		}
		return fmt.Errorf("%w: %s %q: %s %w (the process behind it would be reachable from the jail)", ErrInvalid, flag, spec, path, what)
	})
	if err != nil && !errors.Is(err, ErrInvalid) {
		// Not wrapped: the file system's error is no verdict on the
		// program, as fs.ErrPermission from a launch would be.
		return invalid("%s %q: cannot check %s for sockets and pipes: %v", flag, spec, src, err)
	}
	return err
}
