package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const memMargin = 8 << 20

func TestLimits_MemoryJS(t *testing.T) {
	before := memAvailable(t)
	cases := map[string]string{
		// Plain arrays: the V8 heap cap meets it first.
		"heap": `const a = []; for (;;) a.push(new Array(1e6).fill(1.5));`,
		// Typed arrays live outside the V8 heap: the cgroup must stop them.
		"buffers": `const a = []; for (;;) a.push(new Uint8Array(1 << 20).fill(7));`,
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bomb.js")
			writeFile(t, path, src)
			inv := pmjailCmd(t, "", append(append([]string{"run", "--json", "--memory", "64M"}, room...), path)...)
			r := inv.Result
			if r == nil || r.Status != "memory_limit" || inv.ExitCode != 137 || r.ExitCode != 137 {
				t.Fatalf("result %+v exit %d, want memory_limit and 137", r, inv.ExitCode)
			}
			if r.Usage.PeakMemoryBytes > 64<<20+memMargin {
				t.Errorf("peak memory %d, want <= 64 MiB + 8 MiB", r.Usage.PeakMemoryBytes)
			}
			if !slices.Contains(r.LimitsHit, "memory") || r.Error == nil || r.Error.Code != "memory_limit" {
				t.Errorf("limits_hit %v error %+v, want memory", r.LimitsHit, r.Error)
			}
		})
	}
	if after := memAvailable(t); after < before-512<<20 {
		t.Errorf("MemAvailable fell from %d to %d", before, after)
	}
}

func TestLimits_MemoryPython(t *testing.T) {
	r := runScript(t, "bomb.py", "import sys\nprint('started', flush=True)\nb = []\nwhile True:\n    b.append(bytearray(1 << 20))\n")
	if r.Status != "memory_limit" || r.ExitCode != 137 || !strings.Contains(r.Stdout, "started") {
		t.Fatalf("status %s exit %d stdout %q error %+v, want memory_limit 137 after the script started", r.Status, r.ExitCode, r.Stdout, r.Error)
	}
	if r.Usage.PeakMemoryBytes > 256<<20+memMargin {
		t.Errorf("peak %d above the default profile's 256M", r.Usage.PeakMemoryBytes)
	}
}

// forkTree is a bounded fork bomb: a tree of depth 3 and fan-out 3 (at most
// 40 shells in all, by construction), each node busy for a while, so an
// unenforced cap would still hurt nobody.
const forkTree = `
node() {
  d=$1
  if [ "$d" -lt 3 ]; then
    for k in 1 2 3; do node $((d+1)) & done
  fi
  i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done
  wait
}
node 0
echo tree-done
`

func TestLimits_ForkBomb(t *testing.T) {
	// The tree's CPU (tens of seconds of busybox ash under the VM suite's
	// emulated CPU) gets room: this is of the pids limit.
	inv := pmjailCmd(t, "", append(append([]string{"exec", "--json", "--pids", "16"}, room...), "--", "/bin/sh", "-c", forkTree)...)
	r := inv.Result
	if r == nil {
		t.Fatalf("no result: %s", inv.Stderr)
	}
	if !slices.Contains(r.LimitsHit, "pids") || r.Usage.PeakTasks > 16 || r.Usage.PeakTasks == 0 {
		t.Errorf("limits_hit %v peak_tasks %d, want pids and <= 16", r.LimitsHit, r.Usage.PeakTasks)
	}
	if !strings.Contains(r.Stderr, "fork") {
		t.Errorf("stderr %q: want the shell's refused fork", r.Stderr)
	}
	// dash carries on after a refused fork and prints tree-done; busybox
	// ash (the VM's /bin/sh) gives up with an error. Either way the run
	// ends by itself, not by a limit of pmjail's.
	if r.Status != "ok" && r.Status != "error" {
		t.Errorf("status %s stdout %q: want the tree to end on its own", r.Status, r.Stdout)
	}
}

func TestLimits_CPUTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spin.js")
	writeFile(t, path, "for (;;) {}\n")
	inv := pmjailCmd(t, "", "run", "--json", "--cpu-time", "1s", path)
	r := inv.Result
	if r == nil || r.Status != "cpu_limit" || inv.ExitCode != 124 {
		t.Fatalf("result %+v exit %d, want cpu_limit 124", r, inv.ExitCode)
	}
	if r.Usage.CPUMS < 900 || r.Usage.WallMS > 5000 {
		t.Errorf("cpu %d ms wall %d ms, want about 1 s of CPU", r.Usage.CPUMS, r.Usage.WallMS)
	}
}

func TestLimits_ConcurrentJobsIsolated(t *testing.T) {
	var bomb, normal *Result
	// Parallel subtests, not bare goroutines: runScript may t.Fatal, which
	// must run on its own test's goroutine. The group returns when both
	// runs have ended.
	t.Run("together", func(t *testing.T) {
		t.Run("bomb", func(t *testing.T) {
			t.Parallel()
			bomb = runScript(t, "bomb.js", `const a = []; for (;;) a.push(new Uint8Array(1 << 20).fill(7));`, append([]string{"--memory", "64M"}, room...)...)
		})
		t.Run("normal", func(t *testing.T) {
			t.Parallel()
			normal = runScript(t, "normal.js", `const a = new Uint8Array(100 << 20).fill(1); let s = 0; for (let i = 0; i < a.length; i += 4096) s += a[i]; console.log(s);`)
		})
	})
	if t.Failed() {
		return
	}
	if bomb.Status != "memory_limit" {
		t.Errorf("bomb: %s, want memory_limit", bomb.Status)
	}
	if normal.Status != "ok" || normal.Stdout != "25600\n" || normal.Usage.PeakMemoryBytes < 100<<20 {
		t.Errorf("normal (100 MiB under the default 256M): %s %q peak %d error %+v, want ok", normal.Status, normal.Stdout, normal.Usage.PeakMemoryBytes, normal.Error)
	}
}

func TestLimits_DiskTmpFull(t *testing.T) {
	bin := buildProber(t)
	r, rep := runProber(t, bin, nil, "fill_tmp", "list=/tmp")
	wantErrno(t, rep, "fill_tmp", "ENOSPC")
	var n int
	if p := rep["fill_tmp"]; p.Detail != nil {
		_ = jsonUnmarshal(p.Detail, &n)
	}
	if n < 15<<20 || n > 16<<20 {
		t.Errorf("wrote %d bytes before ENOSPC, want the default profile's 16M", n)
	}
	if r.Status != "ok" || r.ExitCode != 0 {
		t.Errorf("status %s exit %d, want the run to end normally", r.Status, r.ExitCode)
	}
	// The shell sees it too.
	inv := pmjailCmd(t, "", "exec", "--json", "--", "/bin/sh", "-c", `s=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; s=$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s; s=$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s; n=0; while [ $n -lt 2000 ] && printf '%s' "$s" >> /tmp/f$((n/400)); do n=$((n+1)); done; echo wrote=$n`)
	// 2000 writes of 16 KiB would be 31 MiB: stopping early means the cap
	// held (dash also reports the failed write; busybox ash stays silent).
	if inv.Result == nil || inv.Result.Status != "ok" || !strings.Contains(inv.Result.Stdout, "wrote=") ||
		strings.Contains(inv.Result.Stdout, "wrote=2000") {
		t.Errorf("shell fill: exit %d stdout %q stderr %q", inv.ExitCode, inv.Result.Stdout, inv.Result.Stderr)
	}
}

func TestLimits_DeepRecursion(t *testing.T) {
	r := runScript(t, "deep.js", "function f(n) { return f(n + 1) + 1; }\nf(0);\n")
	if r.Status != "error" || r.Error == nil || r.Error.Code != "RangeError" || !strings.Contains(r.Error.Message, "Maximum call stack") {
		t.Fatalf("status %s error %+v, want error RangeError Maximum call stack", r.Status, r.Error)
	}
}

func TestLimits_IPCFlood(t *testing.T) {
	src := `
const counts = {};
for (let i = 0; i < __N__; i++) {
  const r = await host.log.info("flood " + i);
  const k = r.ok ? "ok" : r.error.code;
  counts[k] = (counts[k] ?? 0) + 1;
}
console.log(JSON.stringify(counts));
`
	// Every call counts against the per-run budget (1000), denied or not.
	// A round trip costs the guest ~0.1 ms of CPU: 20x the budget is a
	// flood that still fits in a generous CPU allowance on a loaded host.
	r := runScript(t, "flood.js", fill(src, "N", "20000"), "--timeout", "60s", "--cpu-time", "50s")
	if r.Status != "ok" || strings.TrimSpace(r.Stdout) != `{"denied":1000,"rate_limited":19000}` || len(r.Logs) != 0 {
		t.Errorf("without --cap log: %s %q logs %d, want ok, no call accepted", r.Status, r.Stdout, len(r.Logs))
	}
	r = runScript(t, "flood.js", fill(src, "N", "3000"), "--timeout", "60s", "--cap", "log")
	if r.Status != "ok" || strings.TrimSpace(r.Stdout) != `{"ok":1000,"rate_limited":2000}` || len(r.Logs) != 1000 {
		t.Errorf("with --cap log: %s %q logs %d error %+v, want ok, 1000 ok then rate_limited", r.Status, r.Stdout, len(r.Logs), r.Error)
	}
}

// TestLimits_CgroupJoinedBeforeStart: the contained process is in the job's
// cgroup in every hierarchy the job uses, and it was there before the init
// stage made its cgroup namespace (which is rooted where the process stood
// then): seen from inside, each of those hierarchies is at "/".
func TestLimits_CgroupJoinedBeforeStart(t *testing.T) {
	inv := pmjailCmd(t, "", "exec", "--json", "--", "/bin/cat", "/proc/self/cgroup")
	r := inv.Result
	if r == nil || r.Status != "ok" {
		t.Fatalf("exec cat: exit %d result %+v stderr %s", inv.ExitCode, r, inv.Stderr)
	}
	p := decodePosture(t, r.Posture)
	inside := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			t.Fatalf("unexpected /proc/self/cgroup line %q", line)
		}
		if parts[1] == "" {
			inside["unified"] = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			inside[c] = parts[2]
		}
	}
	checked := 0
	for layer, ctl := range map[string]string{"cgroup_memory": "memory", "cgroup_pids": "pids", "cgroup_cpu": "cpu"} {
		if p.state(layer) != "applied" {
			// Allowed only where the posture says the layer is missing.
			t.Logf("%s is %s on this host", layer, p.state(layer))
			continue
		}
		at, ok := inside[ctl]
		if !ok {
			at, ok = inside["unified"]
		}
		if !ok || at != "/" {
			t.Errorf("%s: the process sees itself at %q, want / (joined before its cgroup namespace)\n%s", ctl, at, r.Stdout)
		}
		checked++
	}
	if checked == 0 {
		t.Skip("the posture says no cgroup layer applies on this host")
	}
}

// TestLimits_PidsOfOne: a pids limit of one still runs a program that
// needs no second task. The init stage's Go runtime threads, which stay as
// the job's pid 1, must not count against the guest's limit: on cgroup v2
// they are in the job's cgroup, and counted out as the runtime starts.
func TestLimits_PidsOfOne(t *testing.T) {
	inv := pmjailCmd(t, "", "exec", "--json", "--pids", "1", "--", "/bin/true")
	r := inv.Result
	if r == nil || r.Status != "ok" || inv.ExitCode != 0 {
		t.Fatalf("exec --pids 1 true: exit %d result %+v stderr %s", inv.ExitCode, r, inv.Stderr)
	}
	if p := decodePosture(t, r.Posture); p.state("cgroup_pids") == "applied" && r.Usage.PeakTasks > 1 {
		t.Errorf("peak_tasks %d under a limit of 1", r.Usage.PeakTasks)
	}
}

// tasksExact is a shell program that takes every task a job of n tasks
// (n >= 2) may hold and asks for one more: itself and n-1 sleeps (the
// binary sleepBind binds), held a while by a builtin loop (for the peak's
// poll to see them where the kernel keeps no pids.peak), then one sleep
// more. It prints "spawned 1" to "spawned n-1" and "holding" as it goes,
// and "over" only if the task past the bound was granted.
func tasksExact(n int) string {
	return fmt.Sprintf(`i=1; while [ $i -lt %d ]; do /usr/bin/sleep 30 & echo spawned $i; i=$((i+1)); done
j=0; while [ $j -lt 30000 ]; do j=$((j+1)); done
echo holding
/usr/bin/sleep 30 &
echo over`, n)
}

// sleepBind is the --ro-bind of the host's sleep at /usr/bin/sleep.
func sleepBind(t *testing.T) string {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if sleep, err = filepath.EvalSymlinks(sleep); err != nil { // busybox's applets are links
		t.Fatal(err)
	}
	return sleep + ":/usr/bin/sleep"
}

// checkTasksExact checks the run of tasksExact(n): the guest held exactly
// n tasks, the one past them refused (the shell gives up on the refused
// fork); where a pids cgroup bounded it (pidsCgroup), it says so, and its
// peak_tasks is the guest's own n.
func checkTasksExact(t *testing.T, r *Result, n int, pidsCgroup bool) {
	t.Helper()
	var want strings.Builder
	for i := 1; i < n; i++ {
		fmt.Fprintf(&want, "spawned %d\n", i)
	}
	want.WriteString("holding\n")
	if r.Stdout != want.String() || !strings.Contains(strings.ToLower(r.Stderr), "fork") || r.Status != "error" {
		t.Fatalf("a guest of %d tasks: status %s stdout %q stderr %q error %+v; want %d tasks held and the next refused",
			n, r.Status, r.Stdout, r.Stderr, r.Error, n)
	}
	if pidsCgroup && (!slices.Contains(r.LimitsHit, "pids") || r.Usage.PeakTasks != uint64(n)) {
		t.Errorf("limits_hit %v peak_tasks %d, want pids and the guest's own %d", r.LimitsHit, r.Usage.PeakTasks, n)
	}
}

// TestLimits_PidsExact: a job's pids limit is the guest's own, its pid 1
// (the jail's init stage, the runtime's parent) left out: a guest under
// --pids 4 holds 4 tasks, not 3, and not 5, and its peak_tasks says 4.
// The jail adds pid 1's share to the bound wherever it writes it (cgroup
// v1: its one thread; v2: all its threads, counted as the runtime
// starts; RLIMIT_NPROC: TestNoCgroupPidsExact).
func TestLimits_PidsExact(t *testing.T) {
	const n = 4
	inv := pmjailCmd(t, "", "exec", "--json", "--pids", strconv.Itoa(n), "--ro-bind", sleepBind(t), "--", "/bin/sh", "-c", tasksExact(n))
	r := inv.Result
	if r == nil {
		t.Fatalf("no result: %s", inv.Stderr)
	}
	applied := decodePosture(t, r.Posture).state("cgroup_pids") == "applied"
	if !applied {
		t.Logf("cgroup_pids is not applied here: RLIMIT_NPROC bounds the tasks")
	}
	checkTasksExact(t, r, n, applied)
}
