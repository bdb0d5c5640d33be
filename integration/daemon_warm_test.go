package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
)

const warmConfig = `{"version": 1, "max_concurrency": 2, "max_queue": 4, "socket": {"mode": "0660"}, "prestart": -1, "warm": {"deno": 2}}`

// awaitWarm waits until the daemon has an idle warm Deno runtime: the
// pool fills after a run, off the request's path.
func awaitWarm(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := d.c.Health(context.Background())
		if err == nil && h.Warm != nil && h.Warm.Idle["deno"] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warm deno runtime became idle within 30s: %+v %v\n%s", h, err, d.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// warmRun runs job on a warm runtime, and fails the test if none served
// it.
func warmRun(t *testing.T, d *daemon, job *api.Job) *api.Result {
	t.Helper()
	// Idle counts every template's runtimes: the one this job needs may
	// still be refilling (slowly on a loaded host) while another is idle.
	// The jobs here may run twice; a cold run for want of an idle one is
	// tried again, any other cold run fails the test.
	var res *api.Result
	for try := 0; ; try++ {
		awaitWarm(t, d)
		var err error
		res, err = d.c.Run(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		if res.Warm || try == 20 || !transientCold(res.WarmReason) {
			break
		}
	}
	if !res.Warm {
		t.Fatalf("run not served warm: %q (status %s, %s)", res.WarmReason, res.Status, res.Stderr)
	}
	return res
}

// offeredRun runs job once an idle runtime of its template could serve
// it: a run that went cold only for want of one is tried again, and the
// result is that of the first run offered one.
func offeredRun(t *testing.T, d *daemon, job *api.Job) *api.Result {
	t.Helper()
	for try := 0; ; try++ {
		awaitWarm(t, d)
		res, err := d.c.Run(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		if res.Warm || try == 20 || !transientCold(res.WarmReason) {
			return res
		}
	}
}

// transientCold reports whether a run went cold only for want of an idle
// runtime of its own template (one being refilled, or a template the pool
// has just learnt), not for anything of the job's.
func transientCold(reason string) bool {
	return reason == "no warm runtime was idle" || strings.HasPrefix(reason, "the first run of its profile and options")
}

// TestDaemonWarm runs jobs on warm runtimes: two in a row share nothing
// (no file, no global, no storage, no module, no random sequence), and
// every limit holds as in a cold run, from the first instruction after
// the start frame.
func TestDaemonWarm(t *testing.T) {
	d := startDaemon(t, daemonDir(t), warmConfig)
	// The daemon starts the default profile's runtimes itself; a run
	// that finds none idle says why it ran cold.
	first, err := d.c.Run(context.Background(), hello())
	if err != nil || first.Status != jail.StatusOK {
		t.Fatalf("first run: %+v %v", first, err)
	}
	if !first.Warm && first.WarmReason == "" {
		t.Fatalf("first run: cold without a reason")
	}
	// A profile's first run teaches the pool its template.
	strict, err := d.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: "console.log(1)", Profile: "strict"})
	if err != nil {
		t.Fatal(err)
	}
	if strict.Status == jail.StatusOK && (strict.Warm || !strings.Contains(strict.WarmReason, "first run")) {
		t.Errorf("first run of another profile: warm %v, reason %q; want cold, its template learnt", strict.Warm, strict.WarmReason)
	}

	t.Run("share nothing", func(t *testing.T) {
		// Each run leaves a trace everywhere a second one could see it,
		// then reports what it found of the first's.
		probe := `
const seen = {
  file: (() => { try { Deno.readTextFileSync(Deno.env.get("TMPDIR") + "/mark"); return true } catch { return false } })(),
  global: typeof globalThis.__mark !== "undefined",
  storage: (() => { try { return localStorage.getItem("mark") !== null } catch { return false } })(),
  module: (await import("data:text/javascript,globalThis.__count=(globalThis.__count??0)+1;export default globalThis.__count")).default,
};
globalThis.__mark = 1;
try { localStorage.setItem("mark", "1") } catch {}
Deno.writeTextFileSync(Deno.env.get("TMPDIR") + "/mark", "1");
const rand = [Math.random(), Math.random(), Math.random()];
const bytes = Array.from(crypto.getRandomValues(new Uint8Array(16)));
export default () => ({ seen, rand, bytes, uuid: crypto.randomUUID() });
`
		type out struct {
			Seen  map[string]any `json:"seen"`
			Rand  []float64      `json:"rand"`
			Bytes []int          `json:"bytes"`
			UUID  string         `json:"uuid"`
		}
		var runs [2]out
		for i := range runs {
			res := warmRun(t, d, &api.Job{Runtime: "deno", Source: probe})
			if res.Status != jail.StatusOK {
				t.Fatalf("run %d: %s %+v %s", i, res.Status, res.Error, res.Stderr)
			}
			if err := json.Unmarshal(res.Value, &runs[i]); err != nil {
				t.Fatalf("run %d: value %s: %v", i, res.Value, err)
			}
		}
		second := runs[1]
		for _, k := range []string{"file", "global", "storage"} {
			if second.Seen[k] != false {
				t.Errorf("the second warm run saw the first's %s: %v", k, second.Seen[k])
			}
		}
		if second.Seen["module"] != float64(1) {
			t.Errorf("the second warm run's module ran %v times in its process, want once (no cached module)", second.Seen["module"])
		}
		if fmt.Sprint(runs[0].Rand) == fmt.Sprint(runs[1].Rand) {
			t.Errorf("Math.random repeated across warm runs: %v", runs[0].Rand)
		}
		if fmt.Sprint(runs[0].Bytes) == fmt.Sprint(runs[1].Bytes) || runs[0].UUID == runs[1].UUID {
			t.Errorf("crypto repeated across warm runs: %v %s", runs[0].Bytes, runs[0].UUID)
		}
	})

	t.Run("required", func(t *testing.T) {
		// A mode required run is served only by a runtime whose jail is
		// exactly its own, and its posture is read back from the runtime:
		// every core layer applied.
		res := warmRun(t, d, &api.Job{Runtime: "deno", Source: "console.log(1)", Mode: "required"})
		p := res.Posture
		if res.Status != jail.StatusOK || p == nil || p.Decision != "run" || len(p.Missing) > 0 {
			t.Fatalf("%s, posture %+v: want ok, decision run, nothing missing", res.Status, p)
		}
		applied := map[string]bool{}
		for _, l := range p.Layers {
			applied[l.Name] = l.State == api.StateApplied
		}
		for _, l := range p.AppliedLayers {
			applied[l] = true
		}
		for _, core := range []string{"mount_namespace", "network_namespace", "seccomp", "no_new_privs", "capabilities", "rootfs"} {
			if !applied[core] {
				t.Errorf("warm required run: layer %s not applied (posture %+v)", core, p)
			}
		}
	})

	t.Run("stack names the job's file", func(t *testing.T) {
		res := warmRun(t, d, &api.Job{Runtime: "deno", Source: "\n\n\nthrow new Error('boom at line four')"})
		if res.Status != jail.StatusError || res.Error == nil || !strings.Contains(res.Error.Stack, "/job/main.js:4:") {
			t.Fatalf("%s %+v: want an error with a stack at /job/main.js:4", res.Status, res.Error)
		}
	})

	limits := []struct {
		name   string
		source string
		limits api.Limits
		want   api.Status
	}{
		{"memory bomb", `const a = []; while (true) a.push(new Array(1 << 20).fill(1.5));`, api.Limits{Memory: 96 << 20}, jail.StatusMemoryLimit},
		{"endless loop, cpu", `while (true) {}`, api.Limits{CPUTime: api.Duration(300 * time.Millisecond), Timeout: api.Duration(20 * time.Second)}, jail.StatusCPULimit},
		{"endless wait, wall", `await new Promise(() => setInterval(() => {}, 1000));`, api.Limits{Timeout: api.Duration(400 * time.Millisecond)}, jail.StatusTimeout},
		{"output", `while (true) console.log("x".repeat(1000));`, api.Limits{Output: 64 << 10}, jail.StatusOutputLimit},
	}
	for _, tc := range limits {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.limits
			res := warmRun(t, d, &api.Job{Runtime: "deno", Source: tc.source, Limits: lim})
			if res.Status != tc.want {
				t.Fatalf("status %s (%+v), want %s", res.Status, res.Error, tc.want)
			}
			// The job's share: the runtime's own start is not counted.
			if tc.want == jail.StatusCPULimit && (res.Usage.CPUMS < 300 || res.Usage.CPUMS > 2000) {
				t.Errorf("cpu_ms %d for a 300ms limit", res.Usage.CPUMS)
			}
		})
	}

	t.Run("pids", func(t *testing.T) {
		// A job whose tasks bound is below what the waiting runtime runs
		// goes cold, and says why: a runtime is idle only once Deno has
		// started, its threads with it, so the check always sees them.
		res := offeredRun(t, d, &api.Job{Runtime: "deno", Source: `console.log(1)`, Limits: api.Limits{Pids: 1}})
		if res.Warm || !strings.Contains(res.WarmReason, "tasks") {
			t.Errorf("warm %v, reason %q: want cold, for its tasks", res.Warm, res.WarmReason)
		}
		if res.Status == jail.StatusOK {
			t.Errorf("a Deno run within one task ended ok")
		}
	})
}

// TestDaemonWarmDenials: a warm run's guest calling a syscall the filter
// refuses (flock, locking a file it may read) has the call counted in
// denied_syscalls, as a cold run does: the run serves the runtime's
// seccomp listener. Its job directory is there to list, empty.
func TestDaemonWarmDenials(t *testing.T) {
	d := startDaemon(t, daemonDir(t), warmConfig)
	const lock = `const listed = [...Deno.readDirSync("/job")].length;
try { Deno.openSync("/pmjail/bootstrap.js").lockSync(); console.log("locked", listed) }
catch (e) { console.log(e.name, listed) }`
	res := warmRun(t, d, &api.Job{Runtime: "deno", Source: lock})
	if res.Status != jail.StatusOK || strings.TrimSpace(res.Stdout) != "PermissionDenied 0" {
		t.Errorf("warm lock: status %s, stdout %q, stderr %q; want it refused, and /job listed empty", res.Status, res.Stdout, res.Stderr)
	}
	if res.Denied["flock"] == 0 {
		t.Errorf("warm run: denied_syscalls %v, want flock counted", res.Denied)
	}
}

// TestDaemonWarmKilled SIGKILLs a daemon whose warm runtimes wait, one
// of them running a job: they die with it, the running one's lease is
// free, and the next start sweeps their cgroups.
func TestDaemonWarmKilled(t *testing.T) {
	dir := daemonDir(t)
	before := snapshotHost(t)
	d := startDaemon(t, dir, warmConfig)
	if res, err := d.c.Run(context.Background(), hello()); err != nil || res.Status != jail.StatusOK {
		t.Fatalf("first run: %+v %v", res, err)
	}
	awaitWarm(t, d)
	// A runtime that waits now was started before the job below came:
	// its guest's start (in clock ticks since boot) is before this one.
	idleSince := bootTicks(t)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		// The answer never comes: the daemon dies first.
		_, _ = d.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `for (;;) {}`})
	}()
	guest := spinningGuest(t, d)
	if started := startTicks(t, guest); started >= idleSince {
		t.Fatalf("the running guest %d started at tick %d, after the runtimes waited (%d): not served warm", guest, started, idleSince)
	}
	pidfd := openPidfd(t, guest)
	slot := leaseSlot(t, guest)
	runtimes := named(descendants(d.pid()), "deno")
	if len(runtimes) < 2 {
		t.Fatalf("deno under the daemon: %v, want the running guest and a waiting runtime", describePids(runtimes))
	}
	oldPID := d.pid()
	all := descendants(oldPID)
	d.kill()
	<-ran
	waitGone(t, pidfd, guest, "the warm run's guest outlived the SIGKILLed daemon")
	if living := outliving(all, 5*time.Second); len(living) > 0 {
		t.Errorf("processes %v outlived the SIGKILLed daemon by 5s", describePids(living))
	}
	wantLeaseFree(t, slot)
	// No jailed process, mount (a jail's root, a network namespace held
	// by a bind), temp dir or SysV segment is left; the cgroups wait for
	// the next start's sweep.
	assertNothingLeft(t, before)
	d2 := startDaemon(t, dir, warmConfig)
	if left := jobCgroups(oldPID); len(left) > 0 {
		t.Errorf("cgroups of the killed daemon left after restart: %v", left)
	}
	if res, err := d2.c.Run(context.Background(), hello()); err != nil || res.Status != jail.StatusOK {
		t.Fatalf("run after restart: %+v %v", res, err)
	}
}

// TestDaemonWarmPython runs Python jobs on warm Pyodide runtimes, loaded
// from the snapshot before the job came: two in a row share nothing
// (Python is reseeded after the take), tracebacks name the job's file, and
// a memory bomb ends at the cgroup's limit.
func TestDaemonWarmPython(t *testing.T) {
	d := startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 2, "max_queue": 4, "socket": {"mode": "0660"}, "prestart": -1, "warm": {"deno": 0, "python": 1}}`)
	await := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			h, err := d.c.Health(context.Background())
			if err == nil && h.Warm != nil && h.Warm.Idle["python"] > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no warm python runtime became idle within 60s: %+v %v\n%s", h, err, d.logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	run := func(source string, lim api.Limits) *api.Result {
		t.Helper()
		// On a fresh cache the snapshot and then the warm code cache are
		// built while the daemon serves, each a new template: a run that
		// went cold for want of its own template's runtime is tried again.
		var res *api.Result
		for try := 0; ; try++ {
			await()
			var err error
			res, err = d.c.Run(context.Background(), &api.Job{Runtime: "python", Source: source, Limits: lim})
			if err != nil {
				t.Fatal(err)
			}
			if res.Warm || try == 10 || !transientCold(res.WarmReason) {
				break
			}
		}
		if !res.Warm {
			t.Fatalf("python run not served warm: %q (status %s, %s)", res.WarmReason, res.Status, res.Stderr)
		}
		return res
	}
	// The template's first run (and, on a fresh state directory, the
	// snapshot's and the caches' build) goes cold; retry until a runtime
	// of the settled template waits.
	for i := 0; ; i++ {
		res, err := d.c.Run(context.Background(), &api.Job{Runtime: "python", Source: "print(1)"})
		if err != nil || res.Status != jail.StatusOK {
			t.Fatalf("python run: %+v %v", res, err)
		}
		if res.Warm {
			break
		}
		if i == 3 {
			t.Fatalf("no python run served warm after 4: %q", res.WarmReason)
		}
		await()
	}
	probe := `
import builtins, os, random
seen = {"global": hasattr(builtins, "_mark"), "file": os.path.exists("/tmp/mark"), "prepare": os.path.exists("/tmp/.pmjail-prepare")}
builtins._mark = 1
try:
    open("/tmp/mark", "w").write("1")
except OSError:
    pass
def main(input, ctx):
    return {"seen": seen, "rand": [random.random() for _ in range(3)], "urandom": os.urandom(16).hex()}
`
	type out struct {
		Seen    map[string]bool `json:"seen"`
		Rand    []float64       `json:"rand"`
		Urandom string          `json:"urandom"`
	}
	var runs [2]out
	for i := range runs {
		res := run(probe, api.Limits{})
		if res.Status != jail.StatusOK {
			t.Fatalf("run %d: %s %+v %s", i, res.Status, res.Error, res.Stderr)
		}
		if err := json.Unmarshal(res.Value, &runs[i]); err != nil {
			t.Fatalf("run %d: value %s: %v", i, res.Value, err)
		}
	}
	if runs[1].Seen["global"] || runs[1].Seen["file"] {
		t.Errorf("the second warm python run saw the first's traces: %v", runs[1].Seen)
	}
	// The loader's set-up before the ready frame (bootstrap.py's
	// prepare) leaves nothing a job sees.
	if runs[0].Seen["prepare"] || runs[1].Seen["prepare"] {
		t.Errorf("a warm python run saw the runtime's set-up scratch file: %v %v", runs[0].Seen, runs[1].Seen)
	}
	if fmt.Sprint(runs[0].Rand) == fmt.Sprint(runs[1].Rand) || runs[0].Urandom == runs[1].Urandom {
		t.Errorf("randomness repeated across warm python runs: %v %s", runs[0].Rand, runs[0].Urandom)
	}
	res := run("\n\nraise KeyError('missing')", api.Limits{})
	if res.Status != jail.StatusError || res.Error == nil || !strings.Contains(res.Error.Stack, `File "/job/main.py", line 3`) {
		t.Errorf("%s %+v: want a traceback at /job/main.py line 3", res.Status, res.Error)
	}
	res = run("b = []\nwhile True:\n    b.append(bytearray(8 << 20))", api.Limits{Memory: 320 << 20})
	if res.Status != jail.StatusMemoryLimit {
		t.Errorf("memory bomb: %s (%+v), want memory_limit", res.Status, res.Error)
	}
}

// bootTicks is the time since boot in clock ticks, rounded down: the unit
// of a process's start in /proc/PID/stat.
func bootTicks(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano() / (int64(time.Second) / clockTicks)
}

// startTicks is when pid started, in clock ticks since boot (field 22
// of /proc/PID/stat).
func startTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		t.Fatalf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		t.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	return n
}
