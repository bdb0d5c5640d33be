// Package dirwatch records what is created in directories, through
// inotify, for tests that check every mkdir a run makes: the kernel
// reports those on cgroupfs too, where listing afterwards would miss a
// directory already removed.
package dirwatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watch sees entries created directly in its directories.
type Watch struct {
	fd   int
	dirs map[int32]string
}

// New starts watching dirs. A directory listed twice is watched once: the
// kernel gives it the same watch descriptor.
func New(dirs []string) (*Watch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	w := &Watch{fd: fd, dirs: map[int32]string{}}
	for _, d := range dirs {
		wd, err := unix.InotifyAddWatch(fd, d, unix.IN_CREATE)
		if err != nil {
			w.Close()
			return nil, &os.PathError{Op: "inotify_add_watch", Path: d, Err: err}
		}
		w.dirs[int32(wd)] = d
	}
	return w, nil
}

// Created returns the paths created since New, or since the last call,
// whose names start with prefix.
func (w *Watch) Created(prefix string) ([]string, error) {
	var made []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return made, nil
		}
		if err != nil {
			return made, os.NewSyscallError("read inotify", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			if strings.HasPrefix(name, prefix) {
				made = append(made, filepath.Join(w.dirs[ev.Wd], name))
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// Close stops watching.
func (w *Watch) Close() error { return unix.Close(w.fd) }
