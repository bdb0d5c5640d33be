package jail

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// prestartPool is a one-shot run's pool (the CLI's): one child, started
// by Prestart, awaited by the run's take, never refilled.
func prestartPool(t *testing.T, h *testCgroups) *Pool {
	p := NewPool(1, PoolOptions{Cgroups: h, Await: true, Spare: func() bool { return false }})
	t.Cleanup(p.Close)
	return p
}

// TestPrestartedChildServesTheRun: a run that starts right after Prestart,
// before the child can be up, waits for it and takes it, with its
// reserved cgroup (the job's limits set on it), and starts no second
// child: the pool holds none and starts none after the run.
func TestPrestartedChildServesTheRun(t *testing.T) {
	h := &testCgroups{t: t, m: cgroupManager(t)}
	p := prestartPool(t, h)
	job := cgroupJob(t, h, `echo one`)
	job.Pool = p
	p.Prestart(job.Spec.Linux.Namespaces)
	out := runReleased(t, job)
	if out.Status != StatusOK || string(out.Stdout) != "one\n" || !out.Pooled {
		t.Fatalf("status %s stdout %q pooled %v message %q", out.Status, out.Stdout, out.Pooled, out.Message)
	}
	if adopted(out) == nil {
		t.Fatalf("the run made its own cgroup %v, want the prestarted child's", out.Cgroup)
	}
	p.fills.Wait()
	if n := p.Idle(); n != 0 {
		t.Errorf("the pool holds %d children after the run, want none (no refill)", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.made) != 1 {
		t.Errorf("%d cgroups reserved, want the one child's", len(h.made))
	}
}

// TestPrestartedChildUntakenGoesWithClose: a run that never takes the
// prestarted child (it ended before its jail) leaves nothing once the pool
// is closed: the child is killed and reaped, its cgroup removed.
func TestPrestartedChildUntakenGoesWithClose(t *testing.T) {
	h := &testCgroups{t: t, m: cgroupManager(t)}
	p := prestartPool(t, h)
	p.Prestart(shellJob(t, `true`, testLimits).Spec.Linux.Namespaces)
	waitIdle(t, p, 1)
	pid := idlePids(p)[0]
	p.Close()
	if !gone(pid) {
		t.Errorf("the untaken child (pid %d) outlived Close", pid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, j := range h.made {
		for _, dir := range j.Paths() {
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the child's cgroup %s outlived Close (%v)", dir, err)
			}
		}
	}
}

// TestPrestartFailureLeavesTheRunItsOwn: a prestart whose cgroup cannot be
// reserved ends its fill; the run's take stops waiting and the run starts
// its own child, whose failure (here none) is its own to report.
func TestPrestartFailureLeavesTheRunItsOwn(t *testing.T) {
	h := &testCgroups{t: t, m: cgroupManager(t)}
	var heard []error
	p := NewPool(1, PoolOptions{Cgroups: failingReserve{h}, Await: true, Spare: func() bool { return false }, OnError: func(err error) { heard = append(heard, err) }})
	t.Cleanup(p.Close)
	job := cgroupJob(t, h, `echo own`)
	job.Pool = p
	p.Prestart(job.Spec.Linux.Namespaces)
	out := runReleased(t, job)
	if out.Status != StatusOK || string(out.Stdout) != "own\n" || out.Pooled {
		t.Fatalf("status %s stdout %q pooled %v message %q", out.Status, out.Stdout, out.Pooled, out.Message)
	}
	p.fills.Wait()
	if len(heard) != 1 || !strings.Contains(heard[0].Error(), "no reservation") {
		t.Errorf("OnError heard %v, want the failed reservation", heard)
	}
}

// failingReserve reserves no cgroup; runs make theirs as h does.
type failingReserve struct{ *testCgroups }

func (failingReserve) Reserve(string) (Cgroup, error) { return nil, errors.New("no reservation") }
