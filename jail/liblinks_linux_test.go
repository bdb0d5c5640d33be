package jail

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeLibraries writes n files to stand for libraries, on the same file
// system as the state directory the test gives linkLibraries.
func fakeLibraries(t *testing.T, n int) []string {
	t.Helper()
	dir := t.TempDir()
	var libs []string
	for i := range n {
		lib := filepath.Join(dir, "lib", string(rune('a'+i))+".so")
		if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lib, []byte(lib), 0o644); err != nil {
			t.Fatal(err)
		}
		libs = append(libs, lib)
	}
	return libs
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

func trees(t *testing.T, state string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(state, libraryLinksDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestLinkLibrariesLinksEachAtItsPath(t *testing.T) {
	state := t.TempDir()
	libs := fakeLibraries(t, 3)
	tree, err := linkLibraries(state, libs)
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		if !sameFile(t, lib, filepath.Join(tree, lib)) {
			t.Errorf("%s in the tree is not %s itself", filepath.Join(tree, lib), lib)
		}
	}
	if err := checkPrivate(tree); err != nil {
		t.Error(err)
	}
	// Nothing else in the tree: every job's root binds it.
	var files []string
	_ = filepath.WalkDir(tree, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, strings.TrimPrefix(path, tree))
		}
		return nil
	})
	if !slices.Equal(files, libs) {
		t.Errorf("tree holds %v, want %v", files, libs)
	}
	again, err := linkLibraries(state, libs)
	if err != nil || again != tree {
		t.Fatalf("second call = %s, %v; want %s", again, err, tree)
	}
	if n := trees(t, state); len(n) != 1 {
		t.Errorf("state holds %v, want the one tree", n)
	}
}

// An upgrade replaces a library with a new file: the next run links the
// new one in a new tree, and the old tree (linking the old file) goes.
func TestLinkLibrariesFollowReplacement(t *testing.T) {
	state := t.TempDir()
	libs := fakeLibraries(t, 2)
	old, err := linkLibraries(state, libs)
	if err != nil {
		t.Fatal(err)
	}
	repl := libs[1] + ".new"
	if err := os.WriteFile(repl, []byte("upgraded"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(repl, libs[1]); err != nil {
		t.Fatal(err)
	}
	tree, err := linkLibraries(state, libs)
	if err != nil {
		t.Fatal(err)
	}
	if tree == old {
		t.Fatal("the replaced library kept its tree")
	}
	if !sameFile(t, libs[1], filepath.Join(tree, libs[1])) {
		t.Error("the new tree does not link the new file")
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Errorf("the stale tree %s is still there (%v)", old, err)
	}
	// An edit in place shows through the link: no new tree.
	if err := os.WriteFile(libs[0], []byte("patched"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := linkLibraries(state, libs); err != nil || again != tree {
		t.Errorf("after an edit in place: %s, %v; want %s", again, err, tree)
	}
}

func TestLinkLibrariesRefusesOthersDirectories(t *testing.T) {
	libs := fakeLibraries(t, 1)
	for name, spoil := range map[string]func(state, tree string) error{
		"writable parent": func(state, _ string) error { return os.Chmod(filepath.Join(state, libraryLinksDir), 0o777) },
		"writable tree":   func(_, tree string) error { return os.Chmod(tree, 0o777) },
		"foreign owner":   func(_, tree string) error { return os.Chown(tree, 12345, 12345) },
		"symlinked tree": func(_, tree string) error {
			if err := os.Rename(tree, tree+".real"); err != nil {
				return err
			}
			return os.Symlink(tree+".real", tree)
		},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "foreign owner" && os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			state := t.TempDir()
			tree, err := linkLibraries(state, libs)
			if err != nil {
				t.Fatal(err)
			}
			if name == "writable parent" {
				// Only a tree still to be made goes through the parent.
				if err := os.RemoveAll(tree); err != nil {
					t.Fatal(err)
				}
			}
			if err := spoil(state, tree); err != nil {
				t.Fatal(err)
			}
			if got, err := linkLibraries(state, libs); err == nil {
				t.Fatalf("linkLibraries used %s", got)
			}
			if mounts := libraryMounts(libs, state, nil, nil); len(mounts) != 1 || mounts[0].Source != libs[0] {
				t.Errorf("mounts %+v: want the library bound by itself", mounts)
			}
		})
	}
}

func TestLibraryMountsBindTopDirectories(t *testing.T) {
	libs, err := SharedLibraries("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	if !sameDevice(t, state, libs[0]) {
		// /tmp may be a tmpfs; /var/tmp rarely is.
		if state, err = os.MkdirTemp("/var/tmp", "pmjail-test-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(state) })
		if !sameDevice(t, state, libs[0]) {
			t.Skipf("neither /tmp nor /var/tmp shares a file system with %s: no links to test", libs[0])
		}
	}
	mounts := libraryMounts(libs, state, []string{"/runtime/sh"}, []string{"ro"})
	var tops []string
	for _, lib := range libs {
		top := "/" + strings.SplitN(lib[1:], "/", 2)[0]
		if !slices.Contains(tops, top) {
			tops = append(tops, top)
		}
	}
	if len(mounts) != len(tops) {
		t.Fatalf("%d mounts %+v for %d libraries: want one per top directory %v", len(mounts), mounts, len(libs), tops)
	}
	for i, m := range mounts {
		if m.Destination != tops[i] || !strings.HasPrefix(m.Source, filepath.Join(state, libraryLinksDir)) || m.Type != "bind" {
			t.Errorf("mount %+v, want %s bound from the tree", m, tops[i])
		}
	}
	// A program or bind under one of those directories needs a mount point
	// there, which a read-only tree cannot give: each library is bound.
	for _, other := range []string{tops[0], tops[0] + "/tools", libs[0] + ".d/x"} {
		if m := libraryMounts(libs, state, []string{"/runtime/sh", other}, nil); len(m) != len(libs) {
			t.Errorf("with a mount at %s: %+v, want each library by itself", other, m)
		}
	}
	if m := libraryMounts(libs, state, []string{tops[0] + "x/y"}, nil); len(m) != len(tops) {
		t.Errorf("a mount at %sx/y is not under %s: %+v", tops[0], tops[0], m)
	}
}

// Hard links cannot cross file systems: a state directory on another one
// binds each library, and the daemon stops trying.
func TestLibraryMountsAcrossFileSystems(t *testing.T) {
	libs, err := SharedLibraries("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	// /dev/shm is a tmpfs of its own; the libraries are not on it.
	state, err := os.MkdirTemp("/dev/shm", "pmjail-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	if sameDevice(t, state, libs[0]) {
		t.Fatalf("%s and %s share a file system", state, libs[0])
	}
	for range 2 {
		mounts := libraryMounts(libs, state, nil, nil)
		if len(mounts) != len(libs) {
			t.Fatalf("mounts %+v: want each of %v by itself", mounts, libs)
		}
		for i, m := range mounts {
			if m.Source != libs[i] || m.Destination != libs[i] {
				t.Errorf("mount %+v, want %s", m, libs[i])
			}
		}
	}
	if _, ok := crossDevice.Load(state); !ok {
		t.Error("EXDEV was not remembered")
	}
	if left, _ := filepath.Glob(filepath.Join(state, libraryLinksDir, "*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func sameDevice(t *testing.T, a, b string) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev
}
