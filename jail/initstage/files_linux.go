package initstage

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The root is built with bare system calls rather than package os: an
// os.File registers with the poller (fcntl twice, epoll_ctl) and MkdirAll
// stats every component first, which cost the init stage ~0.3 ms a run
// for a handful of mount points and files.

// mkdirAll creates dir and any missing parents (mode 0755, less the
// umask), as os.MkdirAll does: an existing directory is fine, anything
// else in the way is an error. Nearly every directory of the new root is
// new, so it tries mkdir first and climbs only on ENOENT.
func mkdirAll(dir string) error {
	err := unix.Mkdir(dir, 0o755)
	if errors.Is(err, unix.ENOENT) {
		if parent := filepath.Dir(dir); parent != dir {
			if err := mkdirAll(parent); err != nil {
				return err
			}
			err = unix.Mkdir(dir, 0o755)
		}
	}
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return &os.PathError{Op: "stat", Path: dir, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return &os.PathError{Op: "mkdir", Path: dir, Err: unix.ENOTDIR}
		}
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	return nil
}

// writeAll writes data to fd.
func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// writeFile creates (or truncates) the file at path and writes data to
// it, as os.WriteFile does.
func writeFile(path string, data []byte, mode uint32) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, mode)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	err = writeAll(fd, data)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// copyTree copies the directory src (an fd, O_PATH will do) into the
// existing directory dst (an fd opened for reading), giving every copy to
// uid: subdirectories (0755) and regular files (0644), nothing else, and
// never following a symbolic link.
func copyTree(src, dst, uid int) error {
	if err := unix.Fchown(dst, uid, uid); err != nil {
		return os.NewSyscallError("fchown", err)
	}
	dir, err := unix.Openat(src, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("open", err)
	}
	defer unix.Close(dir)
	names, err := readDirNames(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "stat", Path: name, Err: err}
		}
		var err error
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = copySubdir(dir, dst, name, uid)
		case unix.S_IFREG:
			err = copyFile(dir, dst, name, uid)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func copySubdir(srcDir, dstDir int, name string, uid int) error {
	if err := unix.Mkdirat(dstDir, name, 0o755); err != nil {
		return &os.PathError{Op: "mkdir", Path: name, Err: err}
	}
	src, err := unix.Openat(srcDir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(src)
	dst, err := unix.Openat(dstDir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(dst)
	if err := copyTree(src, dst, uid); err != nil {
		return &os.PathError{Op: "copy", Path: name, Err: err}
	}
	return nil
}

func copyFile(srcDir, dstDir int, name string, uid int) error {
	in, err := unix.Openat(srcDir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(in)
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil // replaced since it was listed
	}
	out, err := unix.Openat(dstDir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "create", Path: name, Err: err}
	}
	err = copyData(out, in, st.Size)
	if err == nil {
		err = unix.Fchown(out, uid, uid)
	}
	if cerr := unix.Close(out); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "copy", Path: name, Err: err}
	}
	return nil
}

// copyData copies in to out: in the kernel with sendfile, through a buffer
// where sendfile will not.
func copyData(out, in int, size int64) error {
	for size > 0 {
		n, err := unix.Sendfile(out, in, nil, int(min(size, 1<<30)))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			break
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // the file shrank
		}
		size -= int64(n)
	}
	if size <= 0 {
		return nil
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(in, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if err := writeAll(out, buf[:n]); err != nil {
			return err
		}
	}
}

// readDirNames lists the directory open at fd, without "." and "..".
func readDirNames(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 8<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, os.NewSyscallError("getdents", err)
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}
