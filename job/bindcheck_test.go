package job

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRefuseChannels(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.MkdirAll(filepath.Join(plain, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plain, "sub", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A link below the source is not followed: in the jail it resolves
	// within the job's root.
	if err := os.Symlink(filepath.Join(dir, "svc"), filepath.Join(plain, "link")); err != nil {
		t.Fatal(err)
	}
	svc := filepath.Join(dir, "svc", "deep")
	if err := os.MkdirAll(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(svc, "svc.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fifo := filepath.Join(dir, "pipes", "p")
	if err := os.MkdirAll(filepath.Dir(fifo), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	toSvc := filepath.Join(dir, "to-svc")
	if err := os.Symlink(filepath.Join(dir, "svc"), toSvc); err != nil {
		t.Fatal(err)
	}

	for _, src := range []string{plain, filepath.Join(dir, "missing")} {
		if err := refuseChannels("--ro-bind", src, src); err != nil {
			t.Errorf("%s: %v, want no error", src, err)
		}
	}
	for _, c := range []struct {
		src, found string
		want       error
	}{
		{filepath.Join(dir, "svc"), sock, ErrBindSocket},
		{sock, sock, ErrBindSocket},
		{toSvc, sock, ErrBindSocket}, // the source itself is resolved
		{filepath.Join(dir, "pipes"), fifo, ErrBindFIFO},
		{dir, "", nil},
	} {
		err := refuseChannels("--ro-bind", c.src+":/x", c.src)
		if err == nil || !errors.Is(err, ErrInvalid) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: %v, want %v", c.src, err, c.want)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `--ro-bind "`+c.src+`:/x"`) || !strings.Contains(msg, c.found) {
			t.Errorf("%s: %q names neither the flag nor %s", c.src, msg, c.found)
		}
	}
}

// A bind source the jail's ids could not use is refused; what lies below
// it is not checked.
func TestRefuseUnreadable(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode, isDir bool) string {
		p := filepath.Join(dir, name)
		var err error
		if isDir {
			err = os.Mkdir(p, mode)
		} else {
			err = os.WriteFile(p, nil, mode)
		}
		if err == nil {
			err = os.Chmod(p, mode) // past the umask
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := mk("private", 0o700, true)
	listless := mk("listless", 0o711, true)
	mk("listless/secret", 0o600, false)
	open := mk("open", 0o755, true)
	mk("open/secret", 0o600, false)
	toPrivate := filepath.Join(dir, "to-private")
	if err := os.Symlink(private, toPrivate); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		src     string
		refused bool
	}{
		{private, true},
		{listless, true},
		{toPrivate, true}, // the source itself is resolved
		{mk("unreadable", 0o600, false), true},
		{open, false},
		{filepath.Join(open, "secret"), true},
		{mk("readable", 0o644, false), false},
		{mk("exec-only", 0o711, false), false}, // a program the jail can run
		{filepath.Join(dir, "missing"), false}, // the init stage says so
	} {
		err := refuseUnreadable("--ro-bind", c.src+":/x", c.src)
		if !c.refused {
			if err != nil {
				t.Errorf("%s: %v, want it accepted", c.src, err)
			}
			continue
		}
		if !errors.Is(err, ErrBindUnreadable) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `--ro-bind "`+c.src+`:/x"`) {
			t.Errorf("%s: %v, want ErrBindUnreadable as the job's bad input naming the bind", c.src, err)
		}
	}
}
