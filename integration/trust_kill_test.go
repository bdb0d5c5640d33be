package integration

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestTrust_LifetimeKillAtAnyMoment: whenever `pmjail run` is SIGKILLed —
// before the jail exists, while the init stage builds the root, as the
// runtime starts, while it runs — nothing of the job is left once the
// next run has swept: no jailed process, mount, temp dir, zombie or
// cgroup. The moments are spread over the CLI's whole start; the kill is
// what the test varies, so these waits are the experiment, not
// synchronisation.
func TestTrust_LifetimeKillAtAnyMoment(t *testing.T) {
	before := snapshotHost(t)
	loop := filepath.Join(t.TempDir(), "loop.js")
	writeFile(t, loop, `for (;;) {}`)
	var killed []int
	for _, after := range []time.Duration{0, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 150} {
		cmd, _ := startPmjail(t, "run", "--json", "--timeout", "30s", loop)
		time.Sleep(after * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		killed = append(killed, cmd.Process.Pid)
	}
	// Only a later run sweeps a SIGKILLed CLI's cgroup.
	if inv := pmjailCmd(t, "", "exec", "--json", "--", "/bin/true"); inv.Result == nil || inv.Result.Status != "ok" {
		t.Fatalf("next run: exit %d %s", inv.ExitCode, inv.Stderr)
	}
	for _, pid := range killed {
		if left := jobCgroups(pid); len(left) > 0 {
			t.Errorf("cgroups of the CLI killed as pid %d left after the next run: %v", pid, left)
		}
	}
	assertNothingLeft(t, before)
}

// TestTrust_LifetimeDaemonKillAtAnyMoment: the same for the daemon,
// SIGKILLed at moments across a submitted run's start; the next daemon's
// start sweeps what each left.
func TestTrust_LifetimeDaemonKillAtAnyMoment(t *testing.T) {
	before := snapshotHost(t)
	loop := filepath.Join(t.TempDir(), "loop.js")
	writeFile(t, loop, `for (;;) {}`)
	var dead []int
	for _, after := range []time.Duration{0, 5, 20, 80} {
		d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 4, "0660"))
		submit, _ := startPmjail(t, "submit", "--socket", d.sock, loop)
		time.Sleep(after * time.Millisecond)
		dead = append(dead, d.pid())
		d.kill()
		_ = submit.Wait()
	}
	next := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 4, "0660"))
	for _, pid := range dead {
		if left := jobCgroups(pid); len(left) > 0 {
			t.Errorf("cgroups of the daemon killed as pid %d left after the next start: %v", pid, left)
		}
	}
	next.stop(t)
	assertNothingLeft(t, before)
}
