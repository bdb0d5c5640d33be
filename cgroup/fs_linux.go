package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/kfile"
)

// traceFile, when a test sets it, sees each cgroup file read or written
// here ("read" or "write", and the path).
var traceFile func(op, path string)

// readFile reads a cgroup file whole, through a bare fd (package kfile
// says why).
func readFile(path string) ([]byte, error) {
	if traceFile != nil {
		traceFile("read", path)
	}
	return kfile.Read(path)
}

// readString reads a small cgroup file.
func readString(path string) (string, error) {
	b, err := readFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return string(b), nil
}

// writeString writes one value to a cgroup file in a single write(2), as
// the kernel parses each write on its own.
func writeString(path, value string) error {
	if traceFile != nil {
		traceFile("write", path)
	}
	fd, err := kfile.Open(path, unix.O_WRONLY)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	var n int
	for {
		n, err = unix.Write(fd, []byte(value))
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	cerr := unix.Close(fd)
	switch {
	case err != nil:
		return fmt.Errorf("write %q to %s: %w", value, path, os.NewSyscallError("write", err))
	case n != len(value):
		return fmt.Errorf("write %q to %s: short write (%d bytes)", value, path, n)
	case cerr != nil:
		return fmt.Errorf("close %s: %w", path, os.NewSyscallError("close", cerr))
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// sameFile reports whether a and b, symlinks followed, are the same file
// (two stats, where filepath.EvalSymlinks takes one per path component).
func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// pidAlive reports whether pid exists (a zombie counts as alive: its
// supervisor has not been reaped, so its jobs are not yet orphans).
func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// hasChildren reports whether the cgroup dir may have child cgroups.
// cgroupfs (kernfs) counts a directory's subdirectories in its link count,
// 2 + children, so one stat answers what a directory read would: at the
// end of every run, for each hierarchy. A failed stat answers yes.
func hasChildren(dir string) bool {
	var st unix.Stat_t
	return unix.Stat(dir, &st) != nil || st.Nlink != 2
}

// readProcsFile returns the pids of one cgroup; one that vanished has none.
func readProcsFile(dir string) ([]int, error) {
	data, err := readFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pids, err := parsePids(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s/cgroup.procs: %w", dir, err)
	}
	return pids, nil
}

// removeTree removes the cgroup dir and any cgroups beneath it, deepest
// first (cgroupfs refuses rmdir of a cgroup with children). EBUSY, which
// the kernel returns while exiting tasks are still being released, is
// retried until deadline. A directory already gone is success.
func removeTree(dir string, deadline time.Time) error {
	// The usual case, an empty leaf, needs no directory walk.
	if err := unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		delay := time.Millisecond
		for {
			err := unix.Rmdir(dirs[i])
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", dirs[i], os.NewSyscallError("rmdir", err))
			}
			time.Sleep(delay)
			delay = min(2*delay, 50*time.Millisecond)
		}
	}
	return nil
}

// controllerList returns the space-separated names of a cgroup.controllers
// or cgroup.subtree_control file as a set.
func controllerList(path string) (map[string]bool, error) {
	s, err := readString(path)
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool)
	for _, c := range strings.Fields(s) {
		set[c] = true
	}
	return set, nil
}
