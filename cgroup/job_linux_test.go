package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/internal/kfile"
	"github.com/pmjail/pmjail/internal/testenv"
)

func TestOOMKillUnderMemoryLimit(t *testing.T) {
	m := requireManager(t)
	const limit = 64 << 20
	j := create(t, m, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(limit), Swap: i64(limit)}})
	// dd allocates its 200 MB block and fills it from /dev/zero.
	c := start(t, j, "exec dd if=/dev/zero of=/dev/null bs=200M count=1")
	err := c.wait(t, 30*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("dd: want to be killed, got %v", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("dd: want SIGKILL, got %v", ee)
	}
	u, err := j.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("usage %+v", u)
	if u.OOMKills == 0 || !u.MemoryLimitHit {
		t.Errorf("want OOMKills > 0 and MemoryLimitHit, got %+v", u)
	}
	if u.MemoryPeakBytes == 0 || u.MemoryPeakBytes > limit+(1<<20) {
		t.Errorf("peak %d: want in (0, limit + 1 MiB]", u.MemoryPeakBytes)
	}
	if err := j.Delete(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, j)
}

func TestMemoryUnderLimitIsNotFlagged(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(256 << 20), Swap: i64(256 << 20)}})
	c := start(t, j, "exec dd if=/dev/zero of=/dev/null bs=16M count=1")
	if err := c.wait(t, 30*time.Second); err != nil {
		t.Fatalf("dd under limit: %v", err)
	}
	u, err := j.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if u.OOMKills != 0 || u.MemoryLimitHit {
		t.Errorf("want no OOM and no limit hit, got %+v", u)
	}
	if u.MemoryPeakBytes < 16<<20 {
		t.Errorf("peak %d: want at least the 16 MiB block", u.MemoryPeakBytes)
	}
}

func TestPidsLimitRefusesForks(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(8)}})
	c := start(t, j, "i=0; while [ $i -lt 20 ]; do sleep 30 & i=$((i+1)); done; sleep 30")
	deadline := time.Now().Add(10 * time.Second)
	var u Usage
	for {
		var err error
		if u, err = j.Stats(); err != nil {
			t.Fatal(err)
		}
		if u.PidsLimitHit || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("usage %+v", u)
	if !u.PidsLimitHit {
		t.Fatalf("want PidsLimitHit, got %+v", u)
	}
	if cur := pidsCurrent(t, j); u.PidsPeak > 8 || cur > 8 {
		t.Errorf("pids beyond the limit of 8: %+v", u)
	}
	if err := j.Delete(); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 5*time.Second)
	assertGone(t, j)
}

func TestCPUTimeAccumulates(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, nil)
	start(t, j, "while :; do :; done")
	deadline := time.Now().Add(15 * time.Second)
	var last time.Duration
	for {
		u, err := j.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if u.CPUTime < last {
			t.Fatalf("CPU time went back from %v to %v", last, u.CPUTime)
		}
		last = u.CPUTime
		if last >= 300*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time %v after 15 s of a busy loop", last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCPUQuotaThrottles(t *testing.T) {
	m := requireManager(t)
	if !m.Host().Has(CPU) {
		testenv.SkipOrFail(t, "cpu controller not usable: %s", m.Host().Reason)
	}
	// 10 ms per 100 ms period: a busy loop gets about a tenth of a CPU.
	j := create(t, m, &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: i64(10000), Period: u64(100000)}})
	start(t, j, "while :; do :; done")
	// The kernel counts the quota's periods and those in which it
	// throttled the group (cpu.stat): wait for ten periods, a second of
	// the loop's life, then the loop must have been throttled and have
	// had about a tenth of that second.
	dir := j.Paths()["cpu"]
	if dir == "" {
		dir = j.Paths()[UnifiedKey]
	}
	var periods, throttled int64
	for deadline := time.Now().Add(15 * time.Second); periods < 10; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d quota periods counted in 15 s", periods)
		}
		periods, throttled = cpuStat(t, dir, "nr_periods"), cpuStat(t, dir, "nr_throttled")
	}
	u, err := j.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if throttled == 0 {
		t.Errorf("a busy loop under a 10%% quota was never throttled in %d periods", periods)
	}
	if limit := time.Duration(periods+1) * 10 * time.Millisecond * 4; u.CPUTime > limit || u.CPUTime == 0 {
		t.Errorf("CPU time %v in %d periods of 100 ms under a 10%% quota: want (0, %v]", u.CPUTime, periods, limit)
	}
}

// cpuStat reads one counter of the cpu.stat file in dir.
func cpuStat(t *testing.T, dir, key string) int64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("cpu.stat %s: %v", key, err)
			}
			return n
		}
	}
	t.Fatalf("%s/cpu.stat has no %s", dir, key)
	return 0
}

func TestKillEndsWholeTree(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(64)}})
	c := start(t, j, `sleep 300 & (sleep 300 & sleep 300 & wait) & sh -c 'sleep 300 & wait' & wait`)
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("tree did not start: %v", pids)
		}
		time.Sleep(10 * time.Millisecond)
		var err error
		if pids, err = j.procs(); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Kill(); err != nil {
		t.Fatal(err)
	}
	if left, err := j.procs(); err != nil || len(left) != 0 {
		t.Fatalf("after Kill: procs %v, %v", left, err)
	}
	var ee *exec.ExitError
	if err := c.wait(t, 5*time.Second); !errors.As(err, &ee) {
		t.Fatalf("shell: want killed, got %v", err)
	}
	for _, p := range pids {
		if p == c.cmd.Process.Pid {
			continue
		}
		if st := procState(p); st != "" && st != "Z" {
			t.Errorf("pid %d survived Kill in state %s", p, st)
		}
	}
	// pids.current drops as the dead are reaped (ours by wait above, the
	// orphaned grandchildren by init), not at exit.
	deadline = time.Now().Add(5 * time.Second)
	for {
		cur := pidsCurrent(t, j)
		if cur == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Kill: %d tasks still counted", cur)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pidsCurrent reads the job's pids.current (which Stats leaves unread
// where the kernel keeps pids.peak).
func pidsCurrent(t *testing.T, j *Group) uint64 {
	t.Helper()
	dir, ok := j.Paths()[Pids]
	if !ok {
		dir = j.Paths()[UnifiedKey]
	}
	s, err := readString(filepath.Join(dir, "pids.current"))
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := parseSingle(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// procState returns the state letter of pid, or "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "?"
	}
	return s[i+2 : i+3]
}

func TestDeleteRemovesEveryHierarchy(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(128 << 20), Swap: i64(128 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(32)},
		CPU:    cpuIfAny(m),
	})
	if len(j.Paths()) == 0 {
		t.Fatal("job has no paths")
	}
	for k, dir := range j.Paths() {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("cgroup %q: %v", k, err)
		}
	}
	start(t, j, "sleep 300")
	if err := j.Delete(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, j)
	if err := j.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := j.Stats(); err == nil {
		t.Error("Stats after Delete: want an error")
	}
}

func cpuIfAny(m *Manager) *specs.LinuxCPU {
	if !m.Host().Has(CPU) {
		return nil
	}
	return &specs.LinuxCPU{Quota: i64(50000), Period: u64(100000)}
}

func TestCreateDeleteCyclesLeaveNothing(t *testing.T) {
	m := requireManager(t)
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(64 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(16)},
	}
	for i := 0; i < 200; i++ {
		j, err := m.Create("cycle-"+itoa(i), res)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := j.Delete(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	if left := leftovers(t, m); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

func TestCreateRejects(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, nil)
	_, id, _ := parseName(j.Name())
	if _, err := m.Create(id, nil); err == nil {
		t.Error("Create of an existing id: want an error, never a shared cgroup")
	}
	for _, bad := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("x", 65), "prestart-1"} {
		if _, err := m.Create(bad, nil); err == nil {
			t.Errorf("Create(%q): want an error", bad)
		}
	}
	if _, err := m.Create("neg", &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(-1)}}); err == nil {
		t.Error("negative memory limit: want an error")
	}
	if left := leftovers(t, m); len(left) != len(j.Paths()) {
		t.Errorf("after rejected creates: %v", left)
	}
}

func TestSweepRemovesOnlyDeadOwners(t *testing.T) {
	m := requireManager(t)
	// A dead pid: a process we started and reaped.
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := dead.Process.Pid
	if pidAlive(deadPid) {
		t.Skip("pid reused at once")
	}
	// A live sibling supervisor: a sleeping process we started.
	sib := exec.Command("/bin/sleep", "60")
	if err := sib.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sib.Process.Kill(); _ = sib.Wait() })

	res := &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(16)}}
	orphan, err := (&Manager{host: m.host, own: owner{pid: deadPid}}).Create("orphan", res)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = orphan.Delete() })
	inOrphan := start(t, orphan, "sleep 300")
	sibling, err := (&Manager{host: m.host, own: owner{pid: sib.Process.Pid}}).Create("sibling", res)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sibling.Delete() })
	// The same sibling as this version names its jobs: with its start.
	_, sibStart, err := kfile.Start(sib.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	named, err := (&Manager{host: m.host, own: owner{sib.Process.Pid, sibStart}}).Create("sibling", res)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = named.Delete() })
	mine := create(t, m, res)

	removed, err := m.Sweep()
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if !slices.Contains(removed, orphan.Name()) {
		t.Errorf("Sweep removed %v, want %s among them", removed, orphan.Name())
	}
	if slices.Contains(removed, sibling.Name()) || slices.Contains(removed, named.Name()) || slices.Contains(removed, mine.Name()) {
		t.Errorf("Sweep removed a live owner's job: %v", removed)
	}
	assertGone(t, orphan)
	var ee *exec.ExitError
	if err := inOrphan.wait(t, 5*time.Second); !errors.As(err, &ee) {
		t.Errorf("task of the orphan: want killed, got %v", err)
	}
	for _, j := range []*Group{sibling, named, mine} {
		for k, dir := range j.Paths() {
			if _, err := os.Stat(dir); err != nil {
				t.Errorf("live job %s lost %q: %v", j.Name(), k, err)
			}
		}
	}
}

// TestDeleteReachesNestedCgroups: a job whose task sits in a cgroup nested
// below the job's own (as a delegated guest could make) is still listed,
// killed and removed, nested cgroups first.
func TestDeleteReachesNestedCgroups(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(32)}})
	c := start(t, j, "sleep 300")
	pid := c.cmd.Process.Pid
	for _, dir := range j.Paths() {
		if hasChildren(dir) {
			t.Fatalf("%s: a new job's cgroup reads as having children", dir)
		}
		inner := filepath.Join(dir, "nested", "inner")
		if err := os.MkdirAll(inner, 0o755); err != nil {
			t.Fatal(err)
		}
		if !hasChildren(dir) {
			t.Fatalf("%s: a child cgroup does not show in the link count", dir)
		}
		if err := writeString(filepath.Join(inner, "cgroup.procs"), itoa(pid)); err != nil {
			t.Fatal(err)
		}
	}
	if pids, err := j.procs(); err != nil || !slices.Contains(pids, pid) {
		t.Fatalf("procs %v, %v: want the nested pid %d", pids, err, pid)
	}
	if err := j.Delete(); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := c.wait(t, 5*time.Second); !errors.As(err, &ee) {
		t.Fatalf("nested task: want killed, got %v", err)
	}
	assertGone(t, j)
}

// TestDeleteWithAHierarchyGone: a busy v1 job one of whose hierarchies is
// already gone (Delete's first pass removes the empty ones) is still
// listed in the others, killed and removed.
func TestDeleteWithAHierarchyGone(t *testing.T) {
	m := requireMode(t, V1)
	j := create(t, m, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(32)}})
	// exec: one task, which the cleanup ends if the test fails.
	c := start(t, j, "exec sleep 300")
	pid := c.cmd.Process.Pid
	dir, ok := j.paths[Pids]
	if !ok || len(j.paths) < 2 {
		t.Skipf("job has hierarchies %v; want pids and another", j.Paths())
	}
	// Out of the job's pids cgroup, back into our own, so that it can go.
	if err := writeString(filepath.Join(m.host.Parent[Pids], "cgroup.procs"), itoa(pid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if pids, err := j.procs(); err != nil || !slices.Contains(pids, pid) {
		t.Fatalf("procs %v, %v: want pid %d from the other hierarchies", pids, err, pid)
	}
	if err := j.Delete(); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := c.wait(t, 5*time.Second); !errors.As(err, &ee) {
		t.Fatalf("task: want killed, got %v", err)
	}
	assertGone(t, j)
}
