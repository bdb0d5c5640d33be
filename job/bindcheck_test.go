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
