package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/runtimes"
)

// waitIdle waits until the pool holds n children.
func waitIdle(t *testing.T, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Idle() != n {
		if time.Now().After(deadline) {
			t.Fatalf("pool holds %d children after 10s, want %d", p.Idle(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// filledPool returns a pool of size that a run has taught its namespaces
// and that holds size children; it is closed when the test ends.
func filledPool(t *testing.T, size int) *Pool {
	t.Helper()
	p := NewPool(size, PoolOptions{})
	t.Cleanup(p.Close)
	job := shellJob(t, `true`, testLimits)
	job.Pool = p
	if out := Run(context.Background(), job); out.Status != StatusOK {
		t.Fatalf("warm-up run: %s %q", out.Status, out.Message)
	}
	waitIdle(t, p, size)
	return p
}

// idlePids lists the pids of the pool's waiting children.
func idlePids(p *Pool) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, q := range p.idle {
		for _, c := range q {
			pids = append(pids, c.proc.Pid)
		}
	}
	return pids
}

// firstIdle is the child a take would try first.
func firstIdle(p *Pool) *child {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, q := range p.idle {
		return q[0]
	}
	return nil
}

// gone reports whether pid no longer exists (it was reaped).
func gone(pid int) bool {
	return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

func TestPoolRunTakesAPooledChild(t *testing.T) {
	testenv.RequireRoot(t)
	p := NewPool(1, PoolOptions{})
	first := shellJob(t, `echo one`, testLimits)
	first.Pool = p
	out := Run(context.Background(), first)
	if out.Status != StatusOK || string(out.Stdout) != "one\n" || out.Pooled {
		t.Fatalf("first run: status %s stdout %q pooled %v message %q", out.Status, out.Stdout, out.Pooled, out.Message)
	}
	// The pool learnt the namespaces from that run and started one.
	waitIdle(t, p, 1)
	pooled := idlePids(p)[0]

	second := shellJob(t, `echo two; (echo x > /x) 2>/dev/null || echo root-readonly; `+outlastReadBack, testLimits)
	second.Pool = p
	out = Run(context.Background(), second)
	if out.Status != StatusOK || string(out.Stdout) != "two\nroot-readonly\n" || !out.Pooled || !out.PooledRoot {
		t.Fatalf("second run: status %s stdout %q pooled %v pooled root %v message %q", out.Status, out.Stdout, out.Pooled, out.PooledRoot, out.Message)
	}
	if o := out.Observed; o == nil || o.Error != "" || !o.NoNewPrivs || !o.NoCapabilities() || o.HostUID < idBase {
		t.Errorf("the pooled run's process read back as %+v", o)
	}
	if !gone(pooled) {
		t.Errorf("the child the second run took (pid %d) outlived its run", pooled)
	}

	// Close kills and reaps what still waits.
	waitIdle(t, p, 1)
	waiting := idlePids(p)[0]
	p.Close()
	if !gone(waiting) || p.Idle() != 0 {
		t.Errorf("after Close: pid %d exists %v, pool holds %d", waiting, !gone(waiting), p.Idle())
	}
	third := shellJob(t, `echo three`, testLimits)
	third.Pool = p
	if out := Run(context.Background(), third); out.Status != StatusOK || out.Pooled {
		t.Errorf("a run after Close: status %s pooled %v", out.Status, out.Pooled)
	}
}

// TestPoolSkipsADeadChild: a pooled child that died while it waited, and
// that nothing reaped meanwhile, is reaped and passed over; the run
// starts its own.
func TestPoolSkipsADeadChild(t *testing.T) {
	testenv.RequireRoot(t)
	p := filledPool(t, 1)
	dead := idlePids(p)[0]
	// As on a host without pidfds, nothing reaps it as it dies
	// (TestPoolReapsAChildDyingWhileItWaits): the take must pass it over.
	firstIdle(p).stopWatch()
	p.watchers.Wait() // the stop ends the watch in the background
	if err := unix.Kill(dead, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Its control socket hangs up once the kernel has torn it down.
	deadline := time.Now().Add(5 * time.Second)
	for firstIdle(p).waiting() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	job := shellJob(t, `echo alive`, testLimits)
	job.Pool = p
	out := Run(context.Background(), job)
	if out.Status != StatusOK || !strings.Contains(string(out.Stdout), "alive") || out.Pooled {
		t.Fatalf("status %s stdout %q pooled %v message %q", out.Status, out.Stdout, out.Pooled, out.Message)
	}
	if !gone(dead) {
		t.Errorf("the dead child (pid %d) was not reaped", dead)
	}
}

func TestPoolResize(t *testing.T) {
	testenv.RequireRoot(t)
	p := filledPool(t, 2)
	pids := idlePids(p)
	p.Resize(0)
	if p.Idle() != 0 {
		t.Fatalf("after Resize(0) the pool holds %d", p.Idle())
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("pid %d outlived Resize(0)", pid)
		}
	}
}

// TestPoolRefillsOnlyWithASpareCore: while spare says every core is busy,
// a run leaves the pool as it found it.
func TestPoolRefillsOnlyWithASpareCore(t *testing.T) {
	testenv.RequireRoot(t)
	var spare atomic.Bool
	// The pool asks Spare when a run offers it a refill; what it decides
	// then is final for that run, so the test waits for the question, not
	// for time to pass.
	asked := make(chan bool, 4)
	p := NewPool(1, PoolOptions{Spare: func() bool { v := spare.Load(); asked <- v; return v }})
	t.Cleanup(p.Close)
	job := shellJob(t, `true`, testLimits)
	job.Pool = p
	if out := Run(context.Background(), job); out.Status != StatusOK {
		t.Fatalf("run: %s %q", out.Status, out.Message)
	}
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the run never offered the pool a refill")
	}
	p.fills.Wait()
	if n := p.Idle(); n != 0 {
		t.Fatalf("with no spare core the pool started %d", n)
	}
	spare.Store(true)
	job = shellJob(t, `true`, testLimits)
	job.Pool = p
	if out := Run(context.Background(), job); out.Status != StatusOK {
		t.Fatalf("run: %s %q", out.Status, out.Message)
	}
	waitIdle(t, p, 1)
}

// TestPoolRefillsWhenARunEnds: a core that comes free only while a run is
// going (the rest of a burst finishing) is used when that run ends, so an
// idle daemon does not wait for its next run to refill.
func TestPoolRefillsWhenARunEnds(t *testing.T) {
	testenv.RequireRoot(t)
	// No core at the run's hand-over; one by the time it ends.
	var asked atomic.Int32
	p := NewPool(1, PoolOptions{Spare: func() bool { return asked.Add(1) > 1 }})
	t.Cleanup(p.Close)
	job := shellJob(t, `true`, testLimits)
	job.Pool = p
	if out := Run(context.Background(), job); out.Status != StatusOK {
		t.Fatalf("run: %s %q", out.Status, out.Message)
	}
	waitIdle(t, p, 1)
	if n := asked.Load(); n != 2 {
		t.Errorf("the pool asked for a spare core %d times, want 2 (hand-over, end)", n)
	}
}

// TestPoolReportsAFailedRefill: a child that cannot be started is reported,
// and the pool stays empty.
func TestPoolReportsAFailedRefill(t *testing.T) {
	testenv.RequireRoot(t)
	failed := make(chan error, 1)
	p := NewPool(1, PoolOptions{OnError: func(err error) { failed <- err }})
	t.Cleanup(p.Close)
	// clone refuses CLONE_THREAD without CLONE_SIGHAND.
	p.replenish(unix.CLONE_THREAD)
	select {
	case err := <-failed:
		if !strings.Contains(err.Error(), "start an init stage ahead") {
			t.Errorf("error %q", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error reported for a refill that cannot start")
	}
	if n := p.Idle(); n != 0 {
		t.Errorf("the pool holds %d after a failed refill", n)
	}
}

// TestPoolPremountedRootServesOnlyItsOwnRun: a pooled child mounts ahead the
// root of the last run the pool served; a run whose root differs (here a
// /tmp of another size), or whose bind source has been replaced since,
// gets its own root built afresh, and the pool premounts the new one for
// the runs after it. The bind source lies under /tmp, which the premounted
// root's tmpfs covers in the child's mount namespace.
func TestPoolPremountedRootServesOnlyItsOwnRun(t *testing.T) {
	testenv.RequireRoot(t)
	p := filledPool(t, 1)
	// The /tmp line of the job's own mountinfo, with builtins only.
	const tmpLine = `while read -r l; do case "$l" in *" /tmp "*) echo "$l";; esac; done < /proc/self/mountinfo`
	bigger := testLimits
	bigger.TmpBytes = 2 << 20
	run := func(job *Job, wantPremounted bool, want string) {
		t.Helper()
		job.Pool = p
		waitIdle(t, p, 1)
		out := Run(context.Background(), job)
		if out.Status != StatusOK || !out.Pooled || out.PooledRoot != wantPremounted || !strings.Contains(string(out.Stdout), want) {
			t.Fatalf("status %s pooled %v pooled root %v (want %v) stdout %q (want %q) message %q",
				out.Status, out.Pooled, out.PooledRoot, wantPremounted, out.Stdout, want, out.Message)
		}
	}
	run(shellJob(t, tmpLine, bigger), false, "size=2048k")
	run(shellJob(t, tmpLine, bigger), true, "size=2048k")

	// Passable by the jail's unprivileged ids, unlike t.TempDir's parent.
	dir, err := os.MkdirTemp("/tmp", "jailtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	marker := filepath.Join(dir, "marker")
	if err := os.WriteFile(marker, []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bound := func() *Job {
		return shellJob(t, `read -r m < /marker; echo "$m"`, testLimits, runtimes.Bind{Source: marker, Target: "/marker"})
	}
	run(bound(), false, "one")
	run(bound(), true, "one")
	waitPremounted(t, p)
	// Replaced, as an upgrade replaces a runtime's files, after the
	// waiting child mounted it.
	next := filepath.Join(dir, "next")
	if err := os.WriteFile(next, []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, marker); err != nil {
		t.Fatal(err)
	}
	run(bound(), false, "two")
	run(bound(), true, "two")
}

// waitPremounted waits until the pool's waiting child has mounted its root
// ahead: its root's tmpfs is up and it reads the control socket again
// (recvmsg), which it does once every mount is made.
func waitPremounted(t *testing.T, p *Pool) {
	t.Helper()
	waitIdle(t, p, 1)
	pid := idlePids(p)[0]
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil || !strings.Contains(string(mounts), "pmjail-root") {
			continue
		}
		if inRecvmsg(strconv.Itoa(pid)) {
			return
		}
	}
	t.Fatalf("the pooled child %d did not premount its root within 10s", pid)
}

// TestPoolReapsAChildDyingWhileItWaits: a pooled child killed while it
// waits (from outside, or by the OOM killer) is reaped at once, with its
// lease and cgroup, and no longer counted; the pool starts another. Before,
// it stayed a zombie holding both until a run came to take it.
func TestPoolReapsAChildDyingWhileItWaits(t *testing.T) {
	testenv.RequireRoot(t)
	p := filledPool(t, 1)
	dead := idlePids(p)[0]
	if err := unix.Kill(dead, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gone(dead) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !gone(dead) {
		t.Fatalf("the pooled child killed while it waited (pid %d) is still there (a zombie) 10s later", dead)
	}
	waitIdle(t, p, 1)
	if pids := idlePids(p); slices.Contains(pids, dead) {
		t.Errorf("the pool still holds the dead child %d: %v", dead, pids)
	}
}
