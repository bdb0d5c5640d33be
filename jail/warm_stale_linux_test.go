package jail

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/runtimes"
)

// warmFrom is a warm template, key key, whose runtime is the shell at
// program (a host file the jail binds, as it binds Deno, its caches and
// Pyodide's snapshot), which says it is ready and waits.
func warmFrom(t *testing.T, h *testCgroups, key, program string) *WarmJob {
	t.Helper()
	// The real ready frame: {"type":"ready"}, 16 bytes, after its length.
	script := `printf '\0\0\0\020{"type":"ready"}' > /pmjail/channel/out; read x < /pmjail/channel/in`
	launch := &runtimes.Launch{Program: program, Target: runtimes.RuntimeDir + "/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/nonexistent"}, Channel: true}
	spec, err := rootfs.NewSpec(launch, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &Job{ID: "warm", Spec: spec.Spec, Files: launch.Files, Timeout: 10 * time.Second, OutputLimit: 1 << 20, Cgroups: h,
		Channel: func(context.Context, net.Conn) error { return nil },
		Ready: func(ctx context.Context, conn net.Conn) error {
			return ipc.AwaitReady(ctx, conn, 10*time.Second)
		},
	}
	return &WarmJob{Key: key, Class: "sh", Template: tmpl}
}

// runtimeDir is a directory for runtime files that the jail's
// unprivileged ids can open, as a runtime's is.
func runtimeDir(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// assertDiscarded fails unless r's jail is reaped and its cgroup removed.
func assertDiscarded(t *testing.T, r *warmRuntime) {
	t.Helper()
	pid := r.child.proc.Pid
	deadline := time.Now().Add(10 * time.Second)
	for !gone(pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !gone(pid) {
		t.Errorf("the runtime's init stage (pid %d) is still there", pid)
	}
	for _, dir := range r.cg.(reservedCgroup).Paths() {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the runtime's cgroup %s is still there (%v)", dir, err)
		}
	}
}

// TestWarmDropsTemplatesOfRebuiltRuntimeFiles: `pmjail prepare` after an
// upgrade builds the runtime's files anew (new caches and snapshot, at
// new paths) and removes the old. New runs' templates then have a new
// key, and the old template's runtimes, which no run can take, waited
// (~10 MiB each for Deno, ~100 MiB for Python) until warm_max_age, and
// held a place among MaxTemplates: with the places full the new
// template was refused and every run went cold. The first run of the
// new template drops the old one, its runtimes ended, and is learnt.
func TestWarmDropsTemplatesOfRebuiltRuntimeFiles(t *testing.T) {
	testenv.RequireRoot(t)
	h := &testCgroups{t: t, m: cgroupManager(t)}
	dir := runtimeDir(t)
	v1, v2 := filepath.Join(dir, "sh-v1"), filepath.Join(dir, "sh-v2")
	copyFile(t, "/bin/sh", v1, 0o755)
	w := NewWarm(map[string]int{"sh": 1}, WarmOptions{MaxTemplates: 1, MaxAge: time.Hour})
	t.Cleanup(w.Close)
	old := warmFrom(t, h, "v1", v1)
	w.Learn(old)
	waiting := waitWarmIdle(t, w)

	// The rebuild: the new files, then the old removed.
	copyFile(t, "/bin/sh", v2, 0o755)
	if err := os.Remove(v1); err != nil {
		t.Fatal(err)
	}
	if r, reason := w.take(warmFrom(t, h, "v2", v2)); r != nil || !strings.Contains(reason, "the first run of its profile and options") {
		t.Fatalf("the new template's first take: %v, %q; want it learnt", r, reason)
	}
	if w.Knows("v1") {
		t.Errorf("the pool still keeps the template whose runtime file is gone")
	}
	assertDiscarded(t, waiting)
	w.Refill()
	if r := waitWarmIdle(t, w); r == waiting {
		t.Errorf("the idle runtime is the old template's")
	}
	if st := w.Stats(); st.Idle["sh"] != 1 {
		t.Errorf("idle %v, want the new template's one", st.Idle)
	}
}

// TestWarmDropsATemplateWhoseRuntimeWasReplacedInPlace: an upgrade that
// replaces the runtime at its path keeps the template's key, so runs go
// on taking runtimes of the old file. Once one is taken, the refill
// starts no more of them: it forgets the template with those waiting,
// and the next run learns the file as it is. A file only written (here
// touched) is the same file, and keeps its template.
func TestWarmDropsATemplateWhoseRuntimeWasReplacedInPlace(t *testing.T) {
	testenv.RequireRoot(t)
	h := &testCgroups{t: t, m: cgroupManager(t)}
	dir := runtimeDir(t)
	sh := filepath.Join(dir, "sh")
	copyFile(t, "/bin/sh", sh, 0o755)
	w := NewWarm(map[string]int{"sh": 2}, WarmOptions{MaxAge: time.Hour})
	t.Cleanup(w.Close)
	wj := warmFrom(t, h, "sh", sh)
	w.Learn(wj)
	deadline := time.Now().Add(30 * time.Second)
	for w.Stats().Idle["sh"] < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not 2 idle in 30 s: %+v", w.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The same file touched (a bind shows what is written into it) is
	// not another: a refill keeps the template and tops it up.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(sh, later, later); err != nil {
		t.Fatal(err)
	}
	r, reason := w.take(&WarmJob{Key: "sh", Class: "sh"})
	if r == nil {
		t.Fatalf("take: %s", reason)
	}
	w.discardAll([]*warmRuntime{r})
	w.Refill()
	for w.Stats().Idle["sh"] < 2 {
		if !w.Knows("sh") || time.Now().After(deadline) {
			t.Fatalf("the template of a touched runtime file: known %v, %+v", w.Knows("sh"), w.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The upgrade: a new file renamed over the old.
	copyFile(t, "/bin/sh", sh+".new", 0o755)
	if err := os.Rename(sh+".new", sh); err != nil {
		t.Fatal(err)
	}
	r, reason = w.take(&WarmJob{Key: "sh", Class: "sh"})
	if r == nil {
		t.Fatalf("take: %s", reason)
	}
	w.mu.Lock()
	other := w.idle["sh"][0]
	w.mu.Unlock()
	w.discardAll([]*warmRuntime{r})
	w.Refill()
	for w.Knows("sh") {
		if time.Now().After(deadline) {
			t.Fatalf("the template of the replaced runtime is still kept 30 s on: %+v", w.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	assertDiscarded(t, other)
	if st := w.Stats(); st.Idle["sh"] != 0 {
		t.Errorf("idle %v after the template was forgotten", st.Idle)
	}
	// The next run teaches it again, from the file as it is.
	w.take(warmFrom(t, h, "sh", sh))
	if !w.Knows("sh") {
		t.Fatal("the template was not learnt again")
	}
	w.Refill()
	waitWarmIdle(t, w)
}
