package runtimes

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
)

// TestDenoCache builds the warm cache for a snapshot install and checks
// what a Python launch makes of it: a per-run copy at DENO_DIR, databases
// without a WAL, nothing writable by others, and a new key (so a rebuild)
// when the snapshot changes.
func TestDenoCache(t *testing.T) {
	testenv.RequireRoot(t)
	in := snapshotInstall(t)
	snap, err := in.PyodideSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.EnsureDenoCache(context.Background(), snap)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size() < 100<<10 {
		t.Errorf("cache %s is only %d bytes", c.Dir, c.Size())
	}
	db := filepath.Join(c.Dir, "v8_code_cache_v2")
	st, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("%s mode %v", db, st.Mode())
	}
	checkPublished(t, c.Dir)
	for _, pattern := range []string{"*-wal", "*-shm", "*-journal", ".deno-cache-build-*"} {
		left, _ := filepath.Glob(filepath.Join(c.Dir, pattern))
		more, _ := filepath.Glob(filepath.Join(in.StateDir, pattern))
		if len(left)+len(more) > 0 {
			t.Errorf("left behind: %v %v", left, more)
		}
	}
	if again, err := in.WarmDenoCache(); err != nil || again.Dir != c.Dir {
		t.Errorf("WarmDenoCache() = %+v, %v", again, err)
	}

	l, err := in.Launch(Guest{Runtime: Python, Source: []byte("pass\n"), MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Copies) != 1 || l.Copies[0].Source != c.Dir || l.Copies[0].Target != denoDir {
		t.Errorf("python launch copies %+v", l.Copies)
	}
	if !slices.Contains(l.Env, "DENO_DIR="+denoDir) {
		t.Errorf("env %v", l.Env)
	}
	js, err := in.Launch(Guest{Runtime: Deno, Source: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c2 := range js.Copies {
		if !strings.HasPrefix(filepath.Base(c2.Source), guestCachePrefix) {
			t.Errorf("deno launch copies %+v, want the guest cache at most", js.Copies)
		}
	}

	// Another snapshot is another key: the cache is missing until rebuilt.
	other := *snap
	other.Meta.SHA256 = strings.Repeat("1", 64)
	if _, err := in.warmDenoCache(&other); err == nil {
		t.Error("a cache for another snapshot was found")
	}
	if removed := in.pruneCaches(pyodideCachePrefix, filepath.Base(c.Dir)); len(removed) != 0 {
		t.Errorf("pruned the current cache's siblings %v", removed)
	}
}

// TestGuestCache builds the JavaScript runs' cache in a fresh state
// directory: Deno's module analysis of the bootstrap, read-only, no WAL; a
// JavaScript launch copies it to DENO_DIR; prune keeps it and removes a
// stale key.
func TestGuestCache(t *testing.T) {
	testenv.RequireRoot(t)
	in := testInstall(t, openStateDir(t))
	if _, err := in.GuestCache(); err == nil {
		t.Fatal("a fresh state directory has a guest cache")
	}
	js, err := in.Launch(Guest{Runtime: Deno, Source: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(js.Copies) != 0 {
		t.Errorf("without a cache the deno launch copies %+v", js.Copies)
	}
	c, err := in.EnsureGuestCache(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(c.Dir, "dep_analysis_cache_v2")
	if st, err := os.Stat(db); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("%s: %v %v", db, st, err)
	}
	checkPublished(t, c.Dir)
	for _, pattern := range []string{"*-wal", "*-shm", "*-journal"} {
		if left, _ := filepath.Glob(filepath.Join(c.Dir, pattern)); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(in.StateDir, ".deno-cache-build-*")); len(left) > 0 {
		t.Errorf("build directories left: %v", left)
	}
	js, err = in.Launch(Guest{Runtime: Deno, Source: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(js.Copies) != 1 || js.Copies[0].Source != c.Dir || js.Copies[0].Target != denoDir {
		t.Errorf("deno launch copies %+v", js.Copies)
	}
	stale := filepath.Join(in.StateDir, guestCachePrefix+"0000000000000000")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	removed := in.Prune(&Prepared{GuestCache: c})
	if !slices.Equal(removed, []string{stale}) {
		t.Errorf("Prune removed %v, want only %s", removed, stale)
	}
	if _, err := in.GuestCache(); err != nil {
		t.Errorf("the current guest cache is gone after prune: %v", err)
	}
}

// checkPublished checks that a published cache is the supervisor's alone
// to write: every entry its, a directory or a regular file, none of them
// writable by others; the jail's ids, which wrote the warm run's files,
// own nothing of it.
func checkPublished(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if int(st.Uid) != os.Geteuid() || !(d.IsDir() || d.Type().IsRegular()) || info.Mode().Perm()&0o022 != 0 {
			t.Errorf("%s: uid %d, mode %v", p, st.Uid, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCopyOut copies a tree the jail's ids could write: directories and
// regular files of one link come across, the supervisor's; a symbolic
// link, a hard link to a file elsewhere and a FIFO do not.
func TestCopyOut(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	secret := filepath.Join(t.TempDir(), "secret")
	for _, f := range []struct{ path, data string }{{"a", "a"}, {"d/b", "b"}, {"d/e/c", "c"}} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, f.path)), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f.path), []byte(f.data), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(src, "symlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(src, "d", "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, filepath.Join(src, "d", "hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	// A socket cannot even be opened for reading (ENXIO): it is skipped,
	// not the copy's end.
	sock, err := net.Listen("unix", filepath.Join(src, "d", "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	if err := copyOut(src, dst); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		got = append(got, rel)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{".", "a", "d", "d/b", "d/e", "d/e/c"}
	if !slices.Equal(got, want) {
		t.Errorf("copied %v, want %v", got, want)
	}
	if data, err := os.ReadFile(filepath.Join(dst, "d/e/c")); err != nil || string(data) != "c" {
		t.Errorf("d/e/c = %q, %v", data, err)
	}
	checkPublished(t, dst)
}
