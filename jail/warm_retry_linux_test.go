package jail

import (
	"context"
	"errors"
	"io"
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

// TestWarmRetriesFailedStart: a runtime whose program cannot be executed
// at the pool's first start (its file bound without execute rights, the
// EACCES a daemon saw at its start) fails that start; the pool counts it,
// says why, and tries again without a run asking, so once the file is
// executable a runtime becomes idle. A run that finds none idle meanwhile
// is told why.
func TestWarmRetriesFailedStart(t *testing.T) {
	testenv.RequireRoot(t)
	h := &testCgroups{t: t, m: cgroupManager(t)}
	// A copy of the shell, not executable yet: the jail binds it as the
	// runtime, and its exec fails with EACCES until the test allows it.
	// Its directory and parents are open to others, as a runtime's are:
	// the jail's unprivileged ids open the bind's source.
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sh := filepath.Join(dir, "sh")
	copyFile(t, "/bin/sh", sh, 0o644)
	// The real ready frame: {"type":"ready"}, 16 bytes, after its length.
	script := `printf '\0\0\0\020{"type":"ready"}' > /pmjail/channel/out; read x < /pmjail/channel/in`
	launch := &runtimes.Launch{Program: sh, Target: runtimes.RuntimeDir + "/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/nonexistent"}, Channel: true}
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
	wj := &WarmJob{Key: "retry", Class: "sh", Template: tmpl}

	errs := make(chan error, 64)
	w := NewWarm(map[string]int{"sh": 1}, WarmOptions{Retry: 50 * time.Millisecond, OnError: func(err error) { errs <- err }})
	t.Cleanup(w.Close)
	w.Learn(wj)
	select {
	case err := <-errs:
		t.Logf("the first start: %v", err)
		if !strings.Contains(err.Error(), "exec /runtime/sh: permission denied") {
			t.Fatalf("the pool said %v, want the exec's permission denied", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pool said nothing of a runtime that could not start in 30 s")
	}
	if st := w.Stats(); st.Failed < 1 || st.Idle["sh"] != 0 {
		t.Fatalf("stats %+v: want a failed start counted and none idle", st)
	}
	if r, reason := w.take(wj); r != nil || !strings.Contains(reason, "no warm runtime was idle") || !strings.Contains(reason, "permission denied") {
		t.Fatalf("take gave %v, %q: want none, and the failed start as the reason", r, reason)
	}

	// Nothing asks the pool again: its own retry has to find the file
	// executable now.
	if err := os.Chmod(sh, 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-errs:
			// Starts already under way may still fail once; later ones
			// are retried.
			t.Logf("while the pool retried: %v", err)
			continue
		case <-time.After(20 * time.Millisecond):
		}
		if w.Stats().Idle["sh"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no runtime idle 30 s after its program became executable: %+v", w.Stats())
		}
	}
	failed := w.Stats().Failed
	r, reason := w.take(wj)
	if r == nil {
		t.Fatalf("the idle runtime was not taken: %s", reason)
	}
	w.discardAll([]*warmRuntime{r})
	w.Close()
	if st := w.Stats(); st.Failed != failed {
		t.Errorf("failures went from %d to %d after a start succeeded", failed, st.Failed)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cg := range h.made {
		for _, dir := range cg.Paths() {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup %s is still there (%v)", dir, err)
			}
		}
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
