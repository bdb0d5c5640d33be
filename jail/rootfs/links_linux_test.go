package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/runtimes"
)

// openTempDir is t.TempDir made passable by others, as a state directory
// must be (the job's unprivileged ids open what is bound from it).
func openTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fakeLibraries writes n root-owned files to stand for libraries, in a
// directory returned to pass as the allowed one, on the same file system
// as the state directories the tests make.
func fakeLibraries(t *testing.T, n int) (libs []string, allowed []string) {
	t.Helper()
	testenv.RequireRoot(t) // only root-owned libraries are linked
	dir := filepath.Join(openTempDir(t), "lib")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		lib := filepath.Join(dir, string(rune('a'+i))+".so")
		if err := os.WriteFile(lib, []byte(lib), 0o644); err != nil {
			t.Fatal(err)
		}
		libs = append(libs, lib)
	}
	return libs, []string{dir}
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	sa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(sa, sb)
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
	state := openTempDir(t)
	libs, allowed := fakeLibraries(t, 3)
	old := unix.Umask(0o077) // the tree is passable whatever the umask
	tree, err := linkLibraries(state, libs, allowed)
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		if !sameFile(t, lib, filepath.Join(tree, lib)) {
			t.Errorf("%s in the tree is not %s itself", filepath.Join(tree, lib), lib)
		}
	}
	// Nothing else in the tree: every job's root binds it; and every
	// directory passable by the job's ids.
	var files []string
	_ = filepath.WalkDir(tree, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() {
			files = append(files, strings.TrimPrefix(path, tree))
		} else if err := checkPrivate(path); err != nil {
			t.Error(err)
		}
		return nil
	})
	if !slices.Equal(files, libs) {
		t.Errorf("tree holds %v, want %v", files, libs)
	}
	again, err := linkLibraries(state, libs, allowed)
	if err != nil || again != tree {
		t.Fatalf("second call = %s, %v; want %s", again, err, tree)
	}
	if n := trees(t, state); len(n) != 1 {
		t.Errorf("state holds %v, want the one tree", n)
	}
}

// An upgrade replaces a library with a new file: the next run links the
// new one in a new tree; a prune removes the old tree (linking the old
// file) and keeps the new one and any other tree still current.
func TestLinkLibrariesFollowReplacement(t *testing.T) {
	state := openTempDir(t)
	libs, allowed := fakeLibraries(t, 2)
	old, err := linkLibraries(state, libs, allowed)
	if err != nil {
		t.Fatal(err)
	}
	other, err := linkLibraries(state, libs[:1], allowed)
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
	tree, err := linkLibraries(state, libs, allowed)
	if err != nil {
		t.Fatal(err)
	}
	if tree == old {
		t.Fatal("the replaced library kept its tree")
	}
	if !sameFile(t, libs[1], filepath.Join(tree, libs[1])) {
		t.Error("the new tree does not link the new file")
	}
	// Runs never prune: one may have just taken the old tree.
	if _, err := os.Lstat(old); err != nil {
		t.Errorf("a run removed the old tree: %v", err)
	}
	// A half-made tree a killed run left, an hour old, goes too.
	halfMade := filepath.Join(state, libraryLinksDir, ".tmp-left")
	if err := os.Mkdir(halfMade, 0o755); err != nil {
		t.Fatal(err)
	}
	twoHoursAgo := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(halfMade, twoHoursAgo, twoHoursAgo); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(state, libraryLinksDir, ".tmp-running")
	if err := os.Mkdir(fresh, 0o755); err != nil {
		t.Fatal(err)
	}
	// Trees of other versions' making: a bare hash (the first version), and
	// a prefix other than this one's.
	var otherVersions []string
	for _, name := range []string{strings.Repeat("ab", treeNameLen/2), "1-" + strings.Repeat("cd", treeNameLen/2)} {
		d := filepath.Join(state, libraryLinksDir, name)
		if err := os.MkdirAll(filepath.Join(d, "lib"), 0o755); err != nil {
			t.Fatal(err)
		}
		otherVersions = append(otherVersions, d)
	}
	removed := PruneLinks(state)
	slices.Sort(removed)
	want := append([]string{halfMade, old}, otherVersions...)
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("pruned %v, want %v", removed, want)
	}
	for _, keep := range []string{tree, other, fresh} {
		if _, err := os.Lstat(keep); err != nil {
			t.Errorf("the current tree %s was pruned: %v", keep, err)
		}
	}
	// An edit in place shows through the link: no new tree.
	if err := os.WriteFile(libs[0], []byte("patched"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := linkLibraries(state, libs, allowed); err != nil || again != tree {
		t.Errorf("after an edit in place: %s, %v; want %s", again, err, tree)
	}
}

func TestLinkLibrariesRefusesOthersPaths(t *testing.T) {
	libs, allowed := fakeLibraries(t, 1)
	for name, spoil := range map[string]func(state, tree string) error{
		"writable libs dir": func(state, _ string) error { return os.Chmod(filepath.Join(state, libraryLinksDir), 0o777) },
		"writable tree":     func(_, tree string) error { return os.Chmod(tree, 0o777) },
		"foreign tree":      func(_, tree string) error { return os.Chown(tree, 12345, 12345) },
		"foreign state dir": func(state, _ string) error { return os.Chown(state, 12345, 12345) },
		"closed state dir":  func(state, _ string) error { return os.Chmod(state, 0o700) },
		"symlinked tree": func(_, tree string) error {
			if err := os.Rename(tree, tree+".real"); err != nil {
				return err
			}
			return os.Symlink(tree+".real", tree)
		},
		"symlinked libs dir": func(state, _ string) error {
			libsDir := filepath.Join(state, libraryLinksDir)
			if err := os.Rename(libsDir, libsDir+".real"); err != nil {
				return err
			}
			return os.Symlink(libsDir+".real", libsDir)
		},
	} {
		t.Run(name, func(t *testing.T) {
			state := openTempDir(t)
			tree, err := linkLibraries(state, libs, allowed)
			if err != nil {
				t.Fatal(err)
			}
			if err := spoil(state, tree); err != nil {
				t.Fatal(err)
			}
			if got, err := linkLibraries(state, libs, allowed); err == nil {
				t.Fatalf("linkLibraries used %s", got)
			}
		})
	}
}

// Only what any local user could read where it is gets linked.
func TestLinkLibrariesOnlyWhatOthersCanRead(t *testing.T) {
	for name, spoil := range map[string]func(lib string) error{
		"closed file":      func(lib string) error { return os.Chmod(lib, 0o600) },
		"writable file":    func(lib string) error { return os.Chmod(lib, 0o666) },
		"set-uid file":     func(lib string) error { return unix.Chmod(lib, 0o4755) },
		"foreign file":     func(lib string) error { return os.Chown(lib, 12345, 12345) },
		"closed directory": func(lib string) error { return os.Chmod(filepath.Dir(lib), 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			libs, allowed := fakeLibraries(t, 1)
			if err := spoil(libs[0]); err != nil {
				t.Fatal(err)
			}
			if got, err := linkLibraries(openTempDir(t), libs, allowed); err == nil {
				t.Fatalf("linked %s into %s", libs[0], got)
			}
		})
	}
	libs, _ := fakeLibraries(t, 1)
	if got, err := linkLibraries(openTempDir(t), libs, []string{"/usr/lib"}); err == nil {
		t.Errorf("linked %s, outside the library directories, into %s", libs[0], got)
	}
}

// libraryState returns a state directory on the file system of lib, where
// hard links to it can be made.
func libraryState(t *testing.T, lib string) string {
	t.Helper()
	state := openTempDir(t)
	if sameDevice(t, state, lib) {
		return state
	}
	// /tmp may be a tmpfs; /var/tmp rarely is.
	state, err := os.MkdirTemp("/var/tmp", "pmjail-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if !sameDevice(t, state, lib) {
		t.Skipf("neither /tmp nor /var/tmp shares a file system with %s: no links to test", lib)
	}
	return state
}

// shLaunch runs /bin/sh at /runtime/sh, with binds.
func shLaunch(binds ...runtimes.Bind) *runtimes.Launch {
	return &runtimes.Launch{Program: "/bin/sh", Target: "/runtime/sh", Args: []string{"sh"}, Binds: binds}
}

// withoutLibraries is mounts less the libraries' own binds and what is
// bound from a tree of links under state.
func withoutLibraries(mounts []specs.Mount, libs []string, state string) []specs.Mount {
	return slices.DeleteFunc(slices.Clone(mounts), func(m specs.Mount) bool {
		return slices.Contains(libs, m.Destination) || strings.HasPrefix(m.Source, state+"/")
	})
}

// NewSpec binds each library by itself and writes nothing; Link makes the
// tree and binds its top directories in their place, the rest of the root
// as it was.
func TestLinkBindsTopDirectories(t *testing.T) {
	testenv.RequireRoot(t) // only root-owned libraries are linked
	libs := libraryFiles(t, "/bin/sh")
	state := libraryState(t, libs[0])
	spec, err := NewSpec(shLaunch(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	described := slices.Clone(spec.Mounts)
	for _, lib := range libs {
		if !slices.ContainsFunc(described, func(m specs.Mount) bool { return m.Destination == lib && m.Source == lib }) {
			t.Errorf("NewSpec's mounts %+v: want %s bound by itself", described, lib)
		}
	}
	if left, _ := os.ReadDir(state); len(left) != 0 {
		t.Fatalf("NewSpec wrote %v", left)
	}
	if err := spec.Link(state); err != nil {
		t.Fatal(err)
	}
	var tops []string
	for _, lib := range libs {
		top := "/" + strings.SplitN(lib[1:], "/", 2)[0]
		if !slices.Contains(tops, top) {
			tops = append(tops, top)
		}
	}
	var bound []string
	tree := ""
	for _, m := range spec.Mounts {
		if slices.Contains(libs, m.Destination) {
			t.Errorf("%s is still bound by itself", m.Destination)
		}
		if strings.HasPrefix(m.Source, filepath.Join(state, libraryLinksDir)+"/") {
			if tree == "" {
				tree = strings.TrimSuffix(m.Source, m.Destination)
			}
			if m.Type != "bind" || m.Source != filepath.Join(tree, m.Destination) {
				t.Errorf("mount %+v, want a top directory bound from the tree %s", m, tree)
			}
			bound = append(bound, m.Destination)
		}
	}
	if !slices.Equal(bound, tops) {
		t.Fatalf("bound %v from the tree, want one mount per top directory %v", bound, tops)
	}
	for _, lib := range libs {
		if !sameFile(t, lib, filepath.Join(tree, lib)) {
			t.Errorf("%s in the bound tree is not %s itself", filepath.Join(tree, lib), lib)
		}
	}
	if got, want := withoutLibraries(spec.Mounts, libs, state), withoutLibraries(described, libs, state); !reflect.DeepEqual(got, want) {
		t.Errorf("Link changed the root's other mounts: %+v, want %+v", got, want)
	}
	// A second Link has nothing left to link, and keeps the tree's binds.
	linked := slices.Clone(spec.Mounts)
	if err := spec.Link(state); err == nil || !reflect.DeepEqual(spec.Mounts, linked) {
		t.Errorf("a second Link: %v, mounts %+v; want an error and %+v", err, spec.Mounts, linked)
	}
	// A program, bind or file under one of those directories needs a
	// mount point there, which a read-only tree cannot give: each library
	// stays bound by itself.
	for _, other := range []string{tops[0], tops[0] + "/tools", libs[0] + ".d/x"} {
		spec, err := NewSpec(shLaunch(runtimes.Bind{Source: "/usr/share", Target: other}), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		described := slices.Clone(spec.Mounts)
		if err := spec.Link(state); err == nil || !reflect.DeepEqual(spec.Mounts, described) {
			t.Errorf("with a mount at %s: Link = %v, mounts %+v; want an error and each library by itself", other, err, spec.Mounts)
		}
	}
	spec, err = NewSpec(shLaunch(runtimes.Bind{Source: "/usr/share", Target: tops[0] + "x/y"}), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Link(state); err != nil {
		t.Errorf("a mount at %sx/y is not under %s: %v", tops[0], tops[0], err)
	}
}

// Hard links cannot cross file systems: a state directory on another one
// binds each library, and makes nothing.
func TestLinkAcrossFileSystems(t *testing.T) {
	libs := libraryFiles(t, "/bin/sh")
	// /dev/shm is a tmpfs of its own; the libraries are not on it.
	state, err := os.MkdirTemp("/dev/shm", "pmjail-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if sameDevice(t, state, libs[0]) {
		t.Fatalf("%s and %s share a file system", state, libs[0])
	}
	spec, err := NewSpec(shLaunch(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	described := slices.Clone(spec.Mounts)
	if err := spec.Link(state); !errors.Is(err, unix.EXDEV) {
		t.Errorf("Link across file systems: %v, want EXDEV", err)
	}
	if !reflect.DeepEqual(spec.Mounts, described) {
		t.Errorf("mounts %+v: want each of %v by itself, as described", spec.Mounts, libs)
	}
	if left, _ := os.ReadDir(state); len(left) != 0 {
		t.Errorf("left behind in %s: %v", state, left)
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

// A prune goes only through the libs directory it checked: one that is a
// symlink, or in a state directory someone else owns, is left alone, and
// so is what it points to.
func TestPruneLinksStaysInItsDirectory(t *testing.T) {
	testenv.RequireRoot(t) // a foreign owner is made with chown
	victim := openTempDir(t)
	looksStale := filepath.Join(victim, treePrefix+strings.Repeat("ef", treeNameLen/2))
	if err := os.MkdirAll(filepath.Join(looksStale, "no-such-host-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(looksStale, "no-such-host-dir", "f"))

	symlinked := openTempDir(t)
	if err := os.Symlink(victim, filepath.Join(symlinked, libraryLinksDir)); err != nil {
		t.Fatal(err)
	}
	foreign := openTempDir(t)
	if err := os.Symlink(victim, filepath.Join(foreign, libraryLinksDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(foreign, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{symlinked, foreign} {
		if removed := PruneLinks(state); len(removed) != 0 {
			t.Errorf("prune of %s removed %v", state, removed)
		}
	}
	if _, err := os.Stat(looksStale); err != nil {
		t.Errorf("the directory a symlink pointed to lost %s: %v", looksStale, err)
	}
}

// The per-run checks apply to a tree made earlier too: a library closed to
// others since is no longer bound from it.
func TestLinkLibrariesRecheckEachRun(t *testing.T) {
	libs, allowed := fakeLibraries(t, 1)
	state := openTempDir(t)
	if _, err := linkLibraries(state, libs, allowed); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(libs[0], 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := linkLibraries(state, libs, allowed); err == nil {
		t.Errorf("a library closed to others is still bound from %s", got)
	}
}

func writeTestFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A program's private libraries (found through its own search path,
// outside the library directories) are never linked: Link says so, and
// leaves each library bound by itself.
func TestLinkLeavesPrivateLibraries(t *testing.T) {
	testenv.RequireRoot(t) // only root-owned libraries are linked
	dir := openTempDir(t)
	lib := filepath.Join(dir, "libown.so")
	compile(t, lib, "int own(void) { return 0; }\n", "-shared", "-fPIC", "-Wl,-soname,libown.so")
	program := filepath.Join(dir, "prog")
	compile(t, program, "int own(void);\nint main(void) { return own(); }\n", "-L"+dir, "-lown", "-Wl,-rpath,"+dir)
	spec, err := NewSpec(&runtimes.Launch{Program: program, Args: []string{"prog"}}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	described := slices.Clone(spec.Mounts)
	if !slices.ContainsFunc(described, func(m specs.Mount) bool { return m.Destination == lib && m.Source == lib }) {
		t.Fatalf("mounts %+v: want %s bound by itself", described, lib)
	}
	state := libraryState(t, "/bin/sh")
	if err := spec.Link(state); err == nil || !strings.Contains(err.Error(), "private") {
		t.Errorf("Link of a program with private libraries: %v; want refused for them", err)
	}
	if !reflect.DeepEqual(spec.Mounts, described) {
		t.Errorf("mounts %+v, want them as described: %+v", spec.Mounts, described)
	}
	if left, _ := os.ReadDir(state); len(left) != 0 {
		t.Errorf("left behind in %s: %v", state, left)
	}
}
