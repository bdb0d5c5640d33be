// Package kfile reads small kernel files (procfs, cgroupfs) through bare
// file descriptors. os.Open makes a pollable file (every kernfs file is
// one) non-blocking and registers it with the runtime's network poller:
// fcntl twice, epoll_ctl at open and at close, and a wake-up of the
// poller's thread, which costs a cgroupfs read more than twice its own
// time (~18 against ~8 µs here) and starts the poller in a process that
// needs none (the init stage).
package kfile

import (
	"errors"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Open opens path with flags, close-on-exec, retrying on EINTR.
func Open(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// Read reads the file at path whole.
func Read(path string) ([]byte, error) {
	fd, err := Open(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
