package jail

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

// TestWarmReapsARuntimeDyingWhileItWaits: a warm runtime killed while it
// waits (by the OOM killer, or from outside) ends its jail: the pool
// reaps it at once, removes its cgroup, counts it no more and starts
// another, rather than at recycle's next round (a quarter of MaxAge, or
// never with none) or when a run comes to take it.
func TestWarmReapsARuntimeDyingWhileItWaits(t *testing.T) {
	testenv.RequireRoot(t)
	h := &testCgroups{t: t, m: cgroupManager(t)}
	w := NewWarm(map[string]int{"sh": 1}, WarmOptions{})
	t.Cleanup(w.Close)
	// The real ready frame: {"type":"ready"}, 16 bytes, after its length.
	w.Learn(warmShell(t, h, `printf '\0\0\0\020{"type":"ready"}' > /pmjail/channel/out; read x < /pmjail/channel/in`, 10*time.Second))
	first := waitWarmIdle(t, w)
	initPid := first.child.proc.Pid
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", initPid, initPid))
	f := strings.Fields(string(kids))
	if len(f) != 1 {
		t.Fatalf("the warm jail's init stage %d has children %q, want its runtime", initPid, kids)
	}
	runtime, _ := strconv.Atoi(f[0])
	if err := unix.Kill(runtime, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gone(initPid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !gone(initPid) {
		t.Fatalf("the init stage (pid %d) of the warm runtime killed while it waited is still there (a zombie) 10s later; stats %+v", initPid, w.Stats())
	}
	rc, ok := first.cg.(reservedCgroup)
	if !ok {
		t.Fatalf("the warm runtime's cgroup is a %T, not the test's", first.cg)
	}
	for _, dir := range rc.Paths() {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the dead runtime's cgroup %s is still there (%v)", dir, err)
		}
	}
	if next := waitWarmIdle(t, w); next == first {
		t.Errorf("the pool still holds the dead runtime")
	}
}

// waitWarmIdle waits until w holds an idle runtime and returns it.
func waitWarmIdle(t *testing.T, w *Warm) *warmRuntime {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		for _, q := range w.idle {
			if len(q) > 0 {
				r := q[0]
				w.mu.Unlock()
				return r
			}
		}
		w.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no warm runtime idle after 30s: %+v", w.Stats())
	return nil
}
