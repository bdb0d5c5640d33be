package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/internal/dirwatch"
)

func TestCleanup_AfterRuns(t *testing.T) {
	before := snapshotHost(t)
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.js")
	loop := filepath.Join(dir, "loop.js")
	bomb := filepath.Join(dir, "bomb.js")
	writeFile(t, ok, `console.log(1)`)
	writeFile(t, loop, `for (;;) {}`)
	writeFile(t, bomb, `const a = []; for (;;) a.push(new Uint8Array(1 << 20).fill(7));`)
	if inv := pmjailCmd(t, "", "run", "--json", ok); inv.Result == nil || inv.Result.Status != "ok" {
		t.Fatalf("finished run: exit %d", inv.ExitCode)
	}
	if inv := pmjailCmd(t, "", "run", "--json", "--timeout", "1s", loop); inv.Result == nil || inv.Result.Status != "timeout" {
		t.Fatalf("timed-out run: exit %d", inv.ExitCode)
	}
	if inv := pmjailCmd(t, "", "run", "--json", "--memory", "64M", bomb); inv.Result == nil || inv.Result.Status != "memory_limit" {
		t.Fatalf("killed run: exit %d", inv.ExitCode)
	}
	// Interrupted: SIGTERM to the supervisor mid-run.
	cmd, _ := startPmjail(t, "run", "--json", loop)
	waitForChild(t, cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if n := jobCgroups(cmd.Process.Pid); len(n) > 0 {
		t.Errorf("cgroups left after SIGTERM: %v", n)
	}
	assertNothingLeft(t, before)
}

// waitForChild waits until the supervisor pid has a job cgroup and a
// descendant that is the guest itself: one that has exec'd the runtime
// (its comm is no longer one of pmjail's own binaries).
func waitForChild(t *testing.T, pid int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		d := descendants(pid)
		if len(jobCgroups(pid)) > 0 && slices.ContainsFunc(d, execdGuest) {
			return d
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("supervisor %d started no guest", pid)
	return nil
}

// execdGuest reports whether pid runs something other than pmjail's own
// binaries (the supervisor, the daemon, the init stage).
func execdGuest(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return false
	}
	switch strings.TrimSpace(string(comm)) {
	case "pmjail", "pmjail-init", "pmjail-serve", "":
		return false
	}
	return true
}

func TestCleanup_SupervisorSIGKILL(t *testing.T) {
	before := snapshotHost(t)
	loop := filepath.Join(t.TempDir(), "loop.js")
	writeFile(t, loop, `for (;;) {}`)
	cmd, _ := startPmjail(t, "run", "--json", "--timeout", "60s", loop)
	sup := cmd.Process.Pid
	kids := waitForChild(t, sup)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if living := outliving(kids, 2*time.Second); len(living) > 0 {
		t.Fatalf("guest processes %v outlived the SIGKILLed supervisor by 2s", describePids(living))
	}
	left := jobCgroups(sup)
	if len(left) == 0 {
		t.Errorf("no cgroup of the SIGKILLed supervisor %d found: the sweep test proves nothing", sup)
	}
	// The next run sweeps the orphan.
	ok := filepath.Join(t.TempDir(), "ok.js")
	writeFile(t, ok, `console.log(1)`)
	if inv := pmjailCmd(t, "", "run", "--json", ok); inv.Result == nil || inv.Result.Status != "ok" {
		t.Fatalf("next run: exit %d %s", inv.ExitCode, inv.Stderr)
	}
	if n := jobCgroups(sup); len(n) > 0 {
		t.Errorf("the next run did not sweep the orphan cgroups %v", n)
	}
	assertNothingLeft(t, before)
}

func TestCleanup_ManySequentialRuns(t *testing.T) {
	before := snapshotHost(t)
	var pids []int
	for i := 0; i < 200; i++ {
		cmd, out := startPmjail(t, "exec", "--", "/bin/true")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("exec /bin/true #%d: %v %s", i, err, out)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	ok := filepath.Join(t.TempDir(), "ok.js")
	writeFile(t, ok, `console.log(1)`)
	for i := 0; i < 20; i++ {
		cmd, out := startPmjail(t, "run", ok)
		if err := cmd.Wait(); err != nil || out.String() != "1\n" {
			t.Fatalf("deno run #%d: %v %q", i, err, out)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	for _, p := range pids {
		if n := jobCgroups(p); len(n) > 0 {
			t.Errorf("run by supervisor %d left %v", p, n)
		}
	}
	assertNothingLeft(t, before)
}

// TestCleanup_OneCgroupPerRun: a CLI run makes its job's cgroup and no
// other: the hierarchies are proven by that cgroup itself, not by a
// throwaway probe cgroup made and removed in each first (inotify sees
// every mkdir, cgroupfs included).
func TestCleanup_OneCgroupPerRun(t *testing.T) {
	inv := pmjailCmd(t, "", "exec", "--json", "--", "/bin/true")
	if inv.Result == nil || inv.Result.Status != "ok" {
		t.Fatalf("exec true: exit %d %s", inv.ExitCode, inv.Stderr)
	}
	p := decodePosture(t, inv.Result.Posture)
	if len(p.Cgroup.Paths) == 0 {
		t.Skip("no job cgroup on this host")
	}
	var parents []string
	for _, dir := range p.Cgroup.Paths {
		parents = append(parents, filepath.Dir(dir))
	}
	w, err := dirwatch.New(parents)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd, out := startPmjail(t, "exec", "--", "/bin/true")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exec true: %v %s", err, out)
	}
	created, err := w.Created(fmt.Sprintf("pmjail-%d-", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// One name, however many hierarchies it was made in.
	made := map[string]int{}
	for _, path := range created {
		made[filepath.Base(path)]++
	}
	if len(made) != 1 {
		t.Errorf("the run made cgroups %v, want its job's alone", made)
	}
}
