package runtimes

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDenoCache builds the warm cache for a snapshot install and checks
// what a Python launch makes of it: a per-run copy at DENO_DIR, databases
// without a WAL, nothing writable by others, and a new key (so a rebuild)
// when the snapshot changes.
func TestDenoCache(t *testing.T) {
	_, err := exec.LookPath("bwrap")
	requireHost(t, err == nil, "bubblewrap (bwrap), which warms the cache")
	in := snapshotInstall(t)
	snap, err := in.PyodideSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.EnsureDenoCache(context.Background(), snap)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size < 100<<10 {
		t.Errorf("cache %s is only %d bytes", c.Dir, c.Size)
	}
	db := filepath.Join(c.Dir, "v8_code_cache_v2")
	st, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("%s mode %v", db, st.Mode())
	}
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

	l, err := in.Launch(Job{Runtime: Python, Source: []byte("pass\n"), MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Copies) != 1 || l.Copies[0].Source != c.Dir || l.Copies[0].Target != denoDir {
		t.Errorf("python launch copies %+v", l.Copies)
	}
	if !slices.Contains(l.Env, "DENO_DIR="+denoDir) {
		t.Errorf("env %v", l.Env)
	}
	js, err := in.Launch(Job{Runtime: Deno, Source: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(js.Copies) != 0 {
		t.Errorf("deno launch copies %+v", js.Copies)
	}

	// Another snapshot is another key: the cache is missing until rebuilt.
	other := *snap
	other.Meta.SHA256 = strings.Repeat("1", 64)
	if _, err := in.warmDenoCache(&other); err == nil {
		t.Error("a cache for another snapshot was found")
	}
	if removed := in.pruneCaches(filepath.Base(c.Dir)); len(removed) != 0 {
		t.Errorf("pruned the current cache's siblings %v", removed)
	}
}
