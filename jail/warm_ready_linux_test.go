package jail

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/runtimes"
)

// warmShell is a warm template whose runtime is /bin/sh running script,
// with the guest channel, and the pool's real ready check.
func warmShell(t *testing.T, h *testCgroups, script string, timeout time.Duration) *WarmJob {
	t.Helper()
	launch := &runtimes.Launch{Program: "/bin/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/nonexistent"}, Channel: true}
	spec, err := rootfs.NewSpec(launch, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &Job{ID: "warm", Spec: spec.Spec, Files: launch.Files, Timeout: 10 * time.Second, OutputLimit: 1 << 20, Cgroups: h,
		Channel: func(context.Context, net.Conn) error { return nil },
		Ready: func(ctx context.Context, conn net.Conn) error {
			return ipc.AwaitReady(ctx, conn, timeout)
		},
	}
	return &WarmJob{Key: script, Class: "sh", Template: tmpl}
}

// TestWarmUnreadyDiscarded: a runtime that starts but never says it is
// ready (a shell that only waits for its start frame) is never idle: the
// pool discards it, cgroup and all, counts it, and says why.
func TestWarmUnreadyDiscarded(t *testing.T) {
	testenv.RequireRoot(t)
	h := &testCgroups{t: t, m: cgroupManager(t)}
	errs := make(chan error, 4)
	w := NewWarm(map[string]int{"sh": 1}, WarmOptions{Retry: time.Hour, OnError: func(err error) { errs <- err }})
	t.Cleanup(w.Close)
	w.Learn(warmShell(t, h, `read x < /pmjail/channel/in`, 300*time.Millisecond))
	select {
	case err := <-errs:
		if !errors.Is(err, ipc.ErrNotReady) || !strings.Contains(err.Error(), "ready within 300ms") {
			t.Fatalf("the pool said %v, want that the runtime was not ready", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pool said nothing of a runtime that never became ready in 30 s")
	}
	st := w.Stats()
	if st.Unready != 1 || st.Failed != 1 || st.Idle["sh"] != 0 {
		t.Fatalf("stats %+v: want one unready runtime counted and none idle", st)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.made) != 1 {
		t.Fatalf("%d cgroups reserved, want the runtime's one", len(h.made))
	}
	for _, dir := range h.made[0].Paths() {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the discarded runtime's cgroup %s is still there (%v)", dir, err)
		}
	}
}
