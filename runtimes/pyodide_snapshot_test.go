package runtimes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
}

func hasSnapshotBind(l *Launch) bool {
	for _, b := range l.Binds {
		if b.Target == snapshotTarget {
			return true
		}
	}
	return false
}

func TestPyodideSnapshotBuilt(t *testing.T) {
	in := snapshotInstall(t)
	snap, err := in.PyodideSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(snap.Path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != snap.Meta.Size || snap.Meta.Size < 1<<20 || len(snap.Meta.SHA256) != 64 {
		t.Errorf("snapshot %s: size %d, sidecar %+v", snap.Path, st.Size(), snap.Meta)
	}
	if snap.Meta.PyodideVersion != "314.0.7" || snap.Meta.DenoVersion != "2.9.6" {
		t.Errorf("sidecar versions %+v", snap.Meta)
	}
	if base := filepath.Base(snap.Path); !strings.HasPrefix(base, "pyodide-314.0.7-deno-2.9.6-"+snap.Meta.LoaderSHA256[:12]) || !strings.HasSuffix(base, ".snapshot") {
		t.Errorf("snapshot path %s", snap.Path)
	}
	if got := in.PythonStart(); got != "snapshot" {
		t.Errorf("PythonStart() = %q", got)
	}
	// Nothing of the build is left beside the snapshot.
	entries, _ := os.ReadDir(in.StateDir)
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "deno-cache-") { // TestDenoCache's
			names = append(names, e.Name())
		}
	}
	if len(names) != 2 {
		t.Errorf("state dir holds %v, want the snapshot and its sidecar", names)
	}
	l, err := in.Launch(Guest{Runtime: Python, Source: []byte("pass\n")})
	if err != nil {
		t.Fatal(err)
	}
	if !hasSnapshotBind(l) || !slices.Contains(l.Args, snapshotTarget) || l.Start != "snapshot" || !l.Channel {
		t.Errorf("launch does not use the snapshot: start %q, args %+v", l.Start, l.Args)
	}
}

// TestPyodideSnapshotStale corrupts a snapshot's recorded checksum: runs
// start cold (and still work), and EnsurePyodideSnapshot rebuilds it.
func TestPyodideSnapshotStale(t *testing.T) {
	good, err := snapshotInstall(t).PyodideSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	in := testInstall(t, t.TempDir())
	if got := in.PythonStart(); !strings.HasPrefix(got, "cold: ") {
		t.Errorf("PythonStart() without a snapshot = %q", got)
	}
	path := filepath.Join(in.StateDir, filepath.Base(good.Path))
	copyFile(t, good.Path, path)
	meta := good.Meta
	meta.SHA256 = strings.Repeat("0", 64)
	side, _ := json.Marshal(meta)
	if err := os.WriteFile(path+".json", side, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := in.PyodideSnapshot(); !errors.Is(err, ErrNoSnapshot) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("PyodideSnapshot() with a bad checksum: %v", err)
	}
	if got := in.PythonStart(); !strings.HasPrefix(got, "cold: ") || !strings.Contains(got, "checksum") {
		t.Errorf("PythonStart() = %q", got)
	}
	l, err := in.Launch(Guest{Runtime: Python, Source: []byte("print('cold', 6 * 7)\n")})
	if err != nil {
		t.Fatal(err)
	}
	if hasSnapshotBind(l) || slices.Contains(l.Args, snapshotTarget) {
		t.Errorf("launch uses a stale snapshot: %+v", l.Args)
	}
	if !strings.HasPrefix(l.Start, "cold: ") || len(l.Copies) != 0 {
		t.Errorf("cold launch: start %q, copies %v", l.Start, l.Copies)
	}

	snap, err := in.EnsurePyodideSnapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Meta.SHA256 == meta.SHA256 || in.PythonStart() != "snapshot" {
		t.Errorf("not rebuilt: %+v, %s", snap.Meta, in.PythonStart())
	}
	// A version mismatch is stale too.
	meta = snap.Meta
	meta.DenoVersion = "0.0.1"
	side, _ = json.Marshal(meta)
	if err := os.WriteFile(path+".json", side, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := in.PyodideSnapshot(); !errors.Is(err, ErrNoSnapshot) {
		t.Errorf("PyodideSnapshot() with another deno version: %v", err)
	}
}

func TestPythonLaunchShape(t *testing.T) {
	in := testInstall(t, t.TempDir())
	for _, c := range []struct {
		mem  int64
		heap string
	}{{0, ""}, {32 << 20, "--max-old-space-size=64"}, {1 << 30, "--max-old-space-size=768"}} {
		l, err := in.Launch(Guest{Runtime: Python, Source: []byte("pass\n"), MemoryBytes: c.mem})
		if err != nil {
			t.Fatal(err)
		}
		var heap string
		for _, a := range l.Args {
			if flags, ok := strings.CutPrefix(a, "--v8-flags="); ok {
				for _, f := range strings.Split(flags, ",") {
					if strings.HasPrefix(f, "--max-old-space-size=") {
						heap = f
					}
				}
			}
			if strings.HasPrefix(a, "--allow-write") && a != "--allow-write="+ChannelOut {
				t.Errorf("launch grants %s", a)
			}
			for _, banned := range []string{"--allow-env", "--allow-net", "--allow-run", "--allow-ffi", "--allow-sys", "--allow-all", "-A"} {
				if strings.HasPrefix(a, banned) {
					t.Errorf("launch grants %s", a)
				}
			}
		}
		if heap != c.heap {
			t.Errorf("memory %d: heap flag %q, want %q", c.mem, heap, c.heap)
		}
		scope := "--allow-read=" + GuestDir + "," + JobDir + "," + pyodideTarget
		if hasZoneinfo() {
			// The host's time zones, bound read-only for zoneinfo.
			scope += "," + zoneinfoDir
		}
		if !slices.Contains(l.Args, scope) {
			t.Errorf("read scope: %v", l.Args)
		}
		if l.Program != in.DenoPath || l.Target != DenoTarget || l.Args[0] != DenoTarget {
			t.Errorf("program %s at %s, argv0 %s", l.Program, l.Target, l.Args[0])
		}
		paths := map[string]bool{}
		for _, f := range l.Files {
			paths[f.Path] = true
		}
		for _, want := range []string{"/pmjail/loader.mjs", "/pmjail/bootstrap.py", "/pmjail/channel.js", "/job/main.py"} {
			if !paths[want] {
				t.Errorf("no file %s", want)
			}
		}
		for _, b := range l.Binds {
			if _, err := os.Stat(b.Source); err != nil {
				t.Errorf("bind source: %v", err)
			}
		}
	}
}

// TestPyodideSnapshotIdentity: a snapshot whose file still has the identity
// recorded at build time is used without hashing, and a change in place
// (same inode, same size) moves its change time, so it is hashed and
// refused.
func TestPyodideSnapshotIdentity(t *testing.T) {
	good, err := snapshotInstall(t).PyodideSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if good.Meta.Identity == nil {
		t.Fatal("a freshly built snapshot's sidecar has no identity")
	}
	in := testInstall(t, t.TempDir())
	path := filepath.Join(in.StateDir, filepath.Base(good.Path))
	copyFile(t, good.Path, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := identityOf(fi)
	if !ok {
		t.Skip("this platform has no file identity")
	}
	meta := good.Meta
	meta.Identity = &id
	side, _ := json.Marshal(meta)
	if err := os.WriteFile(path+".json", side, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := in.PyodideSnapshot(); err != nil {
		t.Fatalf("PyodideSnapshot() with a matching identity: %v", err)
	}

	// Kernels without fine-grained timestamps move ctime at a clock tick
	// (a few ms): change the file in a later one.
	time.Sleep(20 * time.Millisecond)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xfe, 0xfd, 0xfc}, 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := in.PyodideSnapshot(); !errors.Is(err, ErrNoSnapshot) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("PyodideSnapshot() after a change in place: %v", err)
	}
}

// TestPruneSnapshots: `pmjail prepare` removes snapshots (and sidecars) of
// other keys and keeps the current one.
func TestPruneSnapshots(t *testing.T) {
	in := testInstall(t, t.TempDir())
	current := filepath.Join(in.StateDir, "pyodide-1-deno-1-aaaaaaaaaaaa.snapshot")
	stale := filepath.Join(in.StateDir, "pyodide-0-deno-0-bbbbbbbbbbbb.snapshot")
	for _, f := range []string{current, current + ".json", stale, stale + ".json"} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed := in.Prune(&Prepared{Snapshot: &Snapshot{Path: current}})
	if !slices.Equal(removed, []string{stale}) {
		t.Errorf("Prune removed %v, want %s", removed, stale)
	}
	for _, f := range []string{stale, stale + ".json"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s is still there", f)
		}
	}
	for _, f := range []string{current, current + ".json"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the current snapshot's %s is gone: %v", f, err)
		}
	}
}
