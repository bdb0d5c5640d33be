package initstage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMkdirAll(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, "a", "b", "c")
	for range 2 { // a second time finds it there
		if err := mkdirAll(deep); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(deep); err != nil || !st.IsDir() {
		t.Fatalf("%s: %v %v", deep, st, err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mkdirAll(file); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("mkdirAll over a file: %v, want ENOTDIR", err)
	}
	if err := mkdirAll(filepath.Join(file, "x")); err == nil {
		t.Errorf("mkdirAll below a file succeeded")
	}
}

func TestMakeMountPointAndWriteRootFile(t *testing.T) {
	root := t.TempDir()
	for range 2 {
		if err := makeMountPoint(filepath.Join(root, "usr/bin/true"), false); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(filepath.Join(root, "usr/bin/true")); err != nil || !st.Mode().IsRegular() || st.Size() != 0 {
		t.Fatalf("mount point: %v %v", st, err)
	}
	if err := writeRootFile(root, "/pmjail/x/boot.js", []byte("long content"), 0); err != nil {
		t.Fatal(err)
	}
	if err := writeRootFile(root, "/pmjail/x/boot.js", []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "pmjail/x/boot.js")); err != nil || string(b) != "short" {
		t.Fatalf("rewritten file: %q %v", b, err)
	}
	// A directory mode makes an empty directory, twice over.
	for range 2 {
		if err := writeRootFile(root, "/job", nil, os.ModeDir|0o755); err != nil {
			t.Fatal(err)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(root, "job")); err != nil || len(entries) != 0 {
		t.Fatalf("directory: %v %v, want an empty one", entries, err)
	}
}

// A file whose path would leave the root is refused whatever let it
// through: nothing is written beside the root, nor anywhere else.
func TestWriteRootFileStaysInTheRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/job/../../escaped", "/job/../../../escaped", "../escaped", "job/x", "/job//x", "/job/./x", "/"} {
		if err := writeRootFile(root, p, []byte("x"), 0o444); err == nil || !strings.Contains(err.Error(), "not a clean absolute path") {
			t.Errorf("writeRootFile(%q): %v, want a refusal", p, err)
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Errorf("beside the root: %v, want the root alone", entries)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("in the root: %v, want nothing", entries)
	}
}

// copyTree copies directories and regular files, and nothing else: no
// symbolic link (followed or not), FIFO or socket.
func TestCopyTree(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	outside := t.TempDir()
	big := strings.Repeat("0123456789abcdef", 20000) // several sendfile-sized pieces
	files := map[string]string{"a": "A", "empty": "", "d/b": "B", "d/e/big": big}
	for name, data := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 { // more entries than one getdents buffer
		if err := os.WriteFile(filepath.Join(src, "d", fmt.Sprintf("many-%03d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		files[fmt.Sprintf("d/many-%03d", i)] = ""
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("S"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{filepath.Join(outside, "secret"), "link"}, {outside, "d/linkdir"}} {
		if err := os.Symlink(l[0], filepath.Join(src, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	srcFD, err := unix.Open(src, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(srcFD)
	dstFD, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dstFD)
	uid := os.Getuid()
	if err := copyTree(srcFD, dstFD, uid); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if int(st.Uid) != uid || int(st.Gid) != uid {
			t.Errorf("%s owned by %d:%d, want %d", rel, st.Uid, st.Gid, uid)
		}
		switch {
		case d.IsDir():
			if info.Mode().Perm() != 0o755&^umask() {
				t.Errorf("%s: mode %v", rel, info.Mode())
			}
		case info.Mode().IsRegular():
			got = append(got, rel)
			if info.Mode().Perm() != 0o644&^umask() {
				t.Errorf("%s: mode %v", rel, info.Mode())
			}
			if b, err := os.ReadFile(p); err != nil || string(b) != files[rel] {
				t.Errorf("%s: %d bytes (%v), want %d", rel, len(b), err, len(files[rel]))
			}
		default:
			t.Errorf("%s copied: %v", rel, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for name := range files {
		want = append(want, name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("copied %d files %v..., want %d", len(got), got[:min(len(got), 5)], len(want))
	}
}

func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

func TestLastCapability(t *testing.T) {
	if n, err := lastCapability(); err != nil || n < 30 {
		t.Errorf("lastCapability: %d, %v", n, err)
	}
}
