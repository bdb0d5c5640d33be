package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// withoutCgroups runs pmjail where cgroups truly cannot be used: inside an
// outer private mount namespace whose /sys/fs/cgroup is an empty tmpfs.
// (That mount exists only in the throwaway namespace unshare creates; the
// host's cgroupfs is untouched.)
func withoutCgroups(t *testing.T, args ...string) (*Result, int) {
	t.Helper()
	return inOuterMountNS(t, `mount -t tmpfs -o size=1m pmjail-test-no-cgroup /sys/fs/cgroup`, args...)
}

// inOuterMountNS runs pmjail with args after setup, a shell command run in
// an outer private mount namespace that unshare creates and that dies with
// the run: what setup mounts there never reaches the host.
func inOuterMountNS(t *testing.T, setup string, args ...string) (*Result, int) {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	script := `set -e; ` + setup + `; exec "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", pmjail}, args...)...)
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("pmjail %v after %q: %v\n%s", args, setup, err, out)
	}
	return &res, code
}

func TestNoCgroupAutoDegradesAndSaysSo(t *testing.T) {
	dir := t.TempDir()
	hello := filepath.Join(dir, "hello.js")
	if err := os.WriteFile(hello, []byte(`console.log("no cgroup, still jailed")`), 0o644); err != nil {
		t.Fatal(err)
	}
	res, code := withoutCgroups(t, "run", "--json", hello)
	if code != 0 || res.Status != "ok" || res.Stdout != "no cgroup, still jailed\n" {
		t.Fatalf("exit %d status %s stdout %q error %+v", code, res.Status, res.Stdout, res.Error)
	}
	p := decodePosture(t, res.Posture)
	if p.Cgroup.Mechanic != "none" {
		t.Errorf("cgroup mechanic %q, want none", p.Cgroup.Mechanic)
	}
	for _, l := range []string{"cgroup_memory", "cgroup_pids", "cgroup_cpu"} {
		if st := p.state(l); st != "degraded" {
			t.Errorf("%s is %q, want degraded", l, st)
		}
	}
	for _, l := range coreLayers {
		if st := p.state(l); st != "applied" {
			t.Errorf("core layer %s is %q without cgroups", l, st)
		}
	}

	// The V8 heap cap is the memory bound that is left.
	bomb := filepath.Join(dir, "bomb.js")
	if err := os.WriteFile(bomb, []byte(`const a = []; for (;;) a.push(new Array(1e6).fill({ x: 1 }));`), 0o644); err != nil {
		t.Fatal(err)
	}
	// V8's last-resort collections before it gives up take seconds of
	// CPU: the run has room, as this is of the heap cap.
	res, code = withoutCgroups(t, append(append([]string{"run", "--json", "--memory", "64M"}, room...), bomb)...)
	if code != 137 || res.Status != "memory_limit" || res.Error == nil || !strings.Contains(res.Error.Message, "V8 heap") {
		t.Fatalf("memory bomb without cgroups: exit %d status %s error %+v", code, res.Status, res.Error)
	}

	// Tasks are still bounded, by RLIMIT_NPROC on the job's own host uid.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if sleep, err = filepath.EvalSymlinks(sleep); err != nil { // busybox's applets are links
		t.Fatal(err)
	}
	res, code = withoutCgroups(t, "exec", "--json", "--pids", "8", "--ro-bind", sleep+":/usr/bin/sleep", "--", "/bin/sh", "-c",
		`n=0; while [ $n -lt 20 ]; do /usr/bin/sleep 2 & n=$((n+1)); done; wait; echo spawned`)
	// The shell meets the cap ("Cannot fork") and gives up with its own
	// error: the run ends promptly, with that said.
	if res.Status != "ok" && res.Status != "error" || !strings.Contains(strings.ToLower(res.Stderr), "fork") || strings.Contains(res.Stdout, "spawned") {
		t.Fatalf("20 tasks under --pids 8 without cgroups: exit %d status %s stdout %q stderr %q", code, res.Status, res.Stdout, res.Stderr)
	}
}

// TestNoCgroupSmallTasksBound: under RLIMIT_NPROC, the bound of last
// resort, the init stage's own Go threads count as one uid too, and a bound
// they met during the set-up ended runs (Go's next thread refused, fatal to
// it; one run in four failed so, for a one-task job). The bound is set only
// as the runtime starts: every run of a one-task job starts. Past the start
// the init stage stays, and a thread it needed then (one run in a few
// hundred: exit 2, or internal_error, after the guest's output) is one it
// has already: every run of a one-task job ends as its guest did, 300 of
// them in a row.
func TestNoCgroupSmallTasksBound(t *testing.T) {
	for i := range 300 {
		res, code := withoutCgroups(t, "exec", "--json", "--pids", "1", "--", "/bin/sh", "-c", "echo one task")
		if code != 0 || res.Status != "ok" || res.Stdout != "one task\n" {
			t.Fatalf("run %d of a one-task job under --pids 1: exit %d status %s stdout %q stderr %q error %+v", i, code, res.Status, res.Stdout, res.Stderr, res.Error)
		}
	}
}

func TestNoCgroupRequiredMemoryCapRefuses(t *testing.T) {
	hello := filepath.Join(t.TempDir(), "hello.js")
	if err := os.WriteFile(hello, []byte(`console.log("must not run")`), 0o644); err != nil {
		t.Fatal(err)
	}
	res, code := withoutCgroups(t, "run", "--json", "--mode", "required", "--require", "cgroup_memory", hello)
	if code != 125 || res.Status != "refused" || res.Error == nil || !strings.Contains(res.Error.Message, "cgroup_memory") {
		t.Fatalf("exit %d status %s error %+v", code, res.Status, res.Error)
	}
	if res.Stdout != "" {
		t.Fatalf("a refused run printed %q", res.Stdout)
	}
	// The core alone is still there: without the extra layer it runs.
	res, code = withoutCgroups(t, "run", "--json", "--mode", "required", hello)
	if code != 0 || res.Status != "ok" {
		t.Fatalf("required without extra layers: exit %d status %s error %+v", code, res.Status, res.Error)
	}
}

// TestNoCgroupHierarchyWritable: a cgroup hierarchy that refuses the job's
// cgroup (here read-only, in an outer mount namespace) is a missing layer,
// found by the run's own cgroup rather than a probe beforehand: mode auto
// runs without it and says why, mode required runs (cgroups are not the
// core) unless that layer is required.
func TestNoCgroupHierarchyWritable(t *testing.T) {
	var st unix.Statfs_t
	target, layer := "/sys/fs/cgroup/pids", "cgroup_pids"
	if err := unix.Statfs(target, &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
		target, layer = "/sys/fs/cgroup", "cgroup_memory" // cgroup v2: the one hierarchy
	}
	readOnly := "mount -o remount,bind,ro " + target
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if sleep, err = filepath.EvalSymlinks(sleep); err != nil {
		t.Fatal(err)
	}
	res, code := inOuterMountNS(t, readOnly, "exec", "--json", "--pids", "8", "--ro-bind", sleep+":/usr/bin/sleep", "--", "/bin/sh", "-c",
		`n=0; while [ $n -lt 20 ]; do /usr/bin/sleep 2 & n=$((n+1)); done; wait; echo spawned`)
	// Tasks are still bounded (RLIMIT_NPROC on the job's own uid): the
	// shell meets the cap and gives up with its own error.
	if res.Status != "ok" && res.Status != "error" || !strings.Contains(strings.ToLower(res.Stderr), "fork") || strings.Contains(res.Stdout, "spawned") {
		t.Fatalf("20 tasks under --pids 8 with %s read-only: exit %d status %s stdout %q stderr %q error %+v", target, code, res.Status, res.Stdout, res.Stderr, res.Error)
	}
	p := decodePosture(t, res.Posture)
	found := false
	for _, l := range p.Layers {
		if l.Name == layer {
			found = true
			if l.State == "applied" || !strings.Contains(l.Detail, "read-only file system") {
				t.Errorf("%s with %s read-only: %s (%s), want it missing and why", layer, target, l.State, l.Detail)
			}
		}
	}
	if !found {
		t.Errorf("posture has no %s layer", layer)
	}
	for _, l := range coreLayers {
		if st := p.state(l); st != "applied" {
			t.Errorf("core layer %s is %q", l, st)
		}
	}
	if target == "/sys/fs/cgroup/pids" && p.state("cgroup_memory") != "applied" {
		t.Errorf("cgroup_memory is %q: only the pids hierarchy was read-only", p.state("cgroup_memory"))
	}

	res, code = inOuterMountNS(t, readOnly, "exec", "--json", "--mode", "required", "--", "/bin/true")
	if code != 0 || res.Status != "ok" {
		t.Errorf("mode required, %s not required: exit %d status %s error %+v", layer, code, res.Status, res.Error)
	}
	res, code = inOuterMountNS(t, readOnly, "exec", "--json", "--mode", "required", "--require", layer, "--", "/bin/true")
	if code != 125 || res.Status != "refused" || res.Error == nil || !strings.Contains(res.Error.Message, layer) {
		t.Errorf("mode required with %s required: exit %d status %s error %+v", layer, code, res.Status, res.Error)
	}
}

// TestNoCgroupPidsExact: without cgroups the job's pids limit is still the
// guest's own (see TestLimits_PidsExact): RLIMIT_NPROC counts the tasks
// of the guest's uid, its pid 1's thread among them, and the jail leaves
// that thread room.
func TestNoCgroupPidsExact(t *testing.T) {
	const n = 4
	r, _ := withoutCgroups(t, "exec", "--json", "--pids", strconv.Itoa(n), "--ro-bind", sleepBind(t), "--", "/bin/sh", "-c", tasksExact(n))
	if st := decodePosture(t, r.Posture).state("cgroup_pids"); st != "degraded" {
		t.Fatalf("cgroup_pids is %q without cgroups, want degraded", st)
	}
	checkTasksExact(t, r, n, false)
}
