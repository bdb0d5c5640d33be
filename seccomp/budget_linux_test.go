package seccomp_test

import (
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/seccomp"
)

func init() {
	// The whole budget in one probe: ok only if every call was denied
	// with EPERM (answered by the supervisor).
	probes["ptrace_budget"] = func() error {
		for range seccomp.NotifyBudget {
			if err := raw(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0); err != unix.EPERM {
				return err
			}
		}
		return nil
	}
}

// TestNotifyBudget: past NotifyBudget notifications Serve closes the
// listener and the kernel answers the rest itself with ENOSYS, still
// refusing them: a flood of denials stops costing the supervisor.
func TestNotifyBudget(t *testing.T) {
	testenv.RequireRoot(t)
	prog := compile(t, probeProfile(t), seccomp.Options{Notify: true})
	ctx := testContext(t)
	// A signal that interrupts a notified call aborts its notification,
	// which Serve has counted, and the call is made again: Go's preemption
	// signals (SIGURG) would spend the budget before the probe's last
	// calls. The probe runs without them; a guest that signals its own
	// threads only spends its budget sooner.
	c := startChild(t, ctx, "probe", prog, []string{"GODEBUG=asyncpreemptoff=1"}, "ptrace_budget", "ptrace_traceme", "mount", "clone_plain")
	var d seccomp.Denials
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.Serve(ctx, c.listener, unix.EPERM); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	got := c.wait(t)
	wg.Wait()
	want := map[string]string{"ptrace_budget": "ok", "ptrace_traceme": "ENOSYS", "mount": "ENOSYS", "clone_plain": "ok"}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
	if !d.Saturated() {
		t.Error("Saturated() is false after the budget was spent")
	}
	if counts := d.Counts(); counts["ptrace"] != seccomp.NotifyBudget || len(counts) != 1 {
		t.Errorf("counts %v, want ptrace: %d only", counts, seccomp.NotifyBudget)
	}
}
