package runtimes

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// copyOut copies the tree at src, which a jail's guest wrote, into
// dst, a new directory of the supervisor's own: directories, and regular
// files that have no other name, and nothing else. Each entry is opened
// below its parent's descriptor without following links, so nothing
// planted in src (a symbolic link, a hard link to a file elsewhere, a
// FIFO, a directory swapped mid-walk) makes the supervisor read, or
// publish, a file of another's choosing. Deno's node_compat_bin/node, a
// link to itself, is left out this way too: the cache needs none.
func copyOut(src, dst string) error {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: src, Err: err}
	}
	return copyOutDir(os.NewFile(uintptr(fd), src), dst)
}

// copyOutDir copies the open directory dir into a new directory dst, and
// closes dir.
func copyOutDir(dir *os.File, dst string) error {
	defer dir.Close()
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := copyOutEntry(int(dir.Fd()), name, filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return nil
}

func copyOutEntry(dir int, name, dst string) error {
	// O_PATH first: it opens any kind of entry (a symbolic link itself, a
	// socket, a FIFO) without acting on it, so that only directories and
	// regular files are ever opened for reading, and through this very
	// inode (its /proc/self/fd link), not its name again.
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dst, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: dst, Err: err}
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		flags |= unix.O_DIRECTORY
	case st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1:
	default:
		// A link, a device, a socket or FIFO, or a file linked elsewhere
		// too: nothing a cache needs, and nothing to follow.
		return nil
	}
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags, 0)
	if err != nil {
		return &os.PathError{Op: "reopen", Path: dst, Err: err}
	}
	f := os.NewFile(uintptr(rfd), name)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return copyOutDir(f, dst)
	}
	defer f.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, f); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", dst, err)
	}
	return out.Close()
}
