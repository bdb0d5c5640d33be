package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// withoutCgroups runs pmjail where cgroups truly cannot be used: inside an
// outer private mount namespace whose /sys/fs/cgroup is an empty tmpfs.
// (That mount exists only in the throwaway namespace unshare creates; the
// host's cgroupfs is untouched.)
func withoutCgroups(t *testing.T, args ...string) (*Result, int) {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	script := `set -e; mount -t tmpfs -o size=1m pmjail-test-no-cgroup /sys/fs/cgroup; exec "$@"`
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
		t.Fatalf("pmjail %v without cgroups: %v\n%s", args, err, out)
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
	res, code = withoutCgroups(t, "run", "--json", "--memory", "64M", bomb)
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
