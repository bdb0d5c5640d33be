package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// posture is the part of a posture object the tests read.
type posture struct {
	Mode     string   `json:"mode"`
	Decision string   `json:"decision"`
	Missing  []string `json:"missing"`
	Layers   []struct {
		Name   string `json:"name"`
		State  string `json:"state"`
		Core   bool   `json:"core"`
		Detail string `json:"detail"`
	} `json:"layers"`
	Cgroup struct {
		Mechanic string            `json:"mechanic"`
		Paths    map[string]string `json:"paths"`
	} `json:"cgroup"`
	Observed *struct {
		NoNewPrivs     bool            `json:"no_new_privs"`
		Seccomp        int             `json:"seccomp_mode"`
		CapEff         string          `json:"cap_eff"`
		CapBnd         string          `json:"cap_bnd"`
		Namespaces     map[string]bool `json:"namespaces"`
		RootReadOnly   bool            `json:"root_read_only"`
		HostUID        int             `json:"host_uid"`
		SeccompFilters int             `json:"seccomp_filters"`
	} `json:"observed"`
}

func (p *posture) state(layer string) string {
	for _, l := range p.Layers {
		if l.Name == layer {
			return l.State
		}
	}
	return ""
}

var coreLayers = []string{"mount_namespace", "rootfs", "network_namespace", "seccomp", "no_new_privs", "capabilities"}

// outerFilterEnv makes this test binary, re-executed, install a seccomp
// filter that refuses new network namespaces and then exec pmjail: a host
// where that layer truly cannot be had.
const outerFilterEnv = "PMJAIL_TEST_OUTER_NO_NETNS"

func init() {
	if os.Getenv(outerFilterEnv) != "1" {
		return
	}
	if err := denyNetworkNamespaces(); err != nil {
		os.Stderr.WriteString("outer filter: " + err.Error() + "\n")
		os.Exit(99)
	}
	args := strings.Split(os.Getenv("PMJAIL_TEST_ARGS"), "\x1f")
	err := syscall.Exec(os.Getenv("PMJAIL_BIN_UNDER_TEST"), append([]string{"pmjail"}, args...), os.Environ())
	os.Stderr.WriteString("exec pmjail: " + err.Error() + "\n")
	os.Exit(98)
}

// underOuterFilter runs pmjail with args beneath the outer filter.
func underOuterFilter(t *testing.T, args ...string) Invocation {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), outerFilterEnv+"=1", "PMJAIL_BIN_UNDER_TEST="+pmjail, "PMJAIL_TEST_ARGS="+strings.Join(args, "\x1f"))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	inv := Invocation{Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		inv.ExitCode = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if inv.ExitCode == 98 || inv.ExitCode == 99 {
		t.Fatalf("outer filter harness failed: %s", inv.Stderr)
	}
	return inv
}

func decodePosture(t *testing.T, data []byte) *posture {
	t.Helper()
	var p posture
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("decode posture: %v\n%s", err, data)
	}
	return &p
}

func TestPostureRequiredOnThisHost(t *testing.T) {
	inv := pmjailCmd(t, "", "posture", "--json", "--mode", "required")
	if inv.ExitCode != 0 {
		t.Fatalf("posture --mode required exit %d, want 0\n%s%s", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	p := decodePosture(t, []byte(inv.Stdout))
	if p.Decision != "run" || len(p.Missing) != 0 {
		t.Fatalf("decision %q missing %v", p.Decision, p.Missing)
	}
	for _, l := range coreLayers {
		if st := p.state(l); st != "applied" {
			t.Errorf("core layer %s is %q, want applied", l, st)
		}
	}
	want := hostCgroupMechanic(t)
	if p.Cgroup.Mechanic != want {
		t.Errorf("cgroup mechanic %q, want %q (from /proc/self/cgroup)", p.Cgroup.Mechanic, want)
	}
	if len(p.Cgroup.Paths) == 0 {
		t.Error("posture names no cgroup path")
	}
	// The readable table and the exit code agree.
	table := pmjailCmd(t, "", "posture")
	if table.ExitCode != 0 || !strings.Contains(table.Stdout, "network_namespace *") {
		t.Errorf("posture table (exit %d):\n%s", table.ExitCode, table.Stdout)
	}
}

// hostCgroupMechanic says which cgroup layout this host has: v2 when the
// unified hierarchy is mounted at /sys/fs/cgroup itself.
func hostCgroupMechanic(t *testing.T) string {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "v2"
	}
	return "v1"
}

func TestRunCarriesItsOwnPosture(t *testing.T) {
	res := runScript(t, "hello.js", `console.log("hi")`)
	if res.Status != "ok" {
		t.Fatalf("status %s: %+v", res.Status, res.Error)
	}
	p := decodePosture(t, res.Posture)
	if p.Observed == nil {
		t.Fatal("the run's posture has no observed state")
	}
	o := p.Observed
	if !o.NoNewPrivs || o.Seccomp != 2 || o.SeccompFilters < 1 || strings.Trim(o.CapEff, "0") != "" || strings.Trim(o.CapBnd, "0") != "" || !o.RootReadOnly {
		t.Errorf("observed state of the run is not contained: %+v", o)
	}
	for _, ns := range []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"} {
		if !o.Namespaces[ns] {
			t.Errorf("the run shares the host's %s namespace", ns)
		}
	}
	if o.HostUID < 1<<30 {
		t.Errorf("guest host uid %d is not from pmjail's unprivileged range", o.HostUID)
	}
	for _, l := range coreLayers {
		if st := p.state(l); st != "applied" {
			t.Errorf("core layer %s is %q in the run's posture", l, st)
		}
	}
}

func TestMissingNetworkNamespaceAutoReportsRequiredRefuses(t *testing.T) {
	// The outer filter really removes the layer: creating a network
	// namespace under it fails.
	probe := underOuterFilter(t, "posture", "--json", "--mode", "required")
	if probe.ExitCode != 1 {
		t.Fatalf("posture --mode required under the outer filter: exit %d, want 1\n%s%s", probe.ExitCode, probe.Stdout, probe.Stderr)
	}
	p := decodePosture(t, []byte(probe.Stdout))
	if p.Decision != "refuse" || len(p.Missing) != 1 || p.Missing[0] != "network_namespace" {
		t.Fatalf("decision %q missing %v, want refuse [network_namespace]", p.Decision, p.Missing)
	}
	if p.state("network_namespace") != "missing" || p.state("pid_namespace") != "applied" {
		t.Fatalf("layers: network %q pid %q", p.state("network_namespace"), p.state("pid_namespace"))
	}

	dir := t.TempDir()
	script := filepath.Join(dir, "hello.js")
	if err := os.WriteFile(script, []byte(`console.log("still contained")`), 0o644); err != nil {
		t.Fatal(err)
	}
	// required: refused, exit 125, the missing layer named.
	inv := underOuterFilter(t, "run", "--json", "--mode", "required", script)
	var res Result
	if err := json.Unmarshal([]byte(inv.Stdout), &res); err != nil {
		t.Fatalf("required run: %v\n%s%s", err, inv.Stdout, inv.Stderr)
	}
	if inv.ExitCode != 125 || res.Status != "refused" || res.Error == nil || !strings.Contains(res.Error.Message, "network_namespace") {
		t.Fatalf("required run: exit %d status %s error %+v", inv.ExitCode, res.Status, res.Error)
	}
	if res.Stdout != "" {
		t.Fatalf("a refused run produced output: %q", res.Stdout)
	}
	// auto: runs, and says the layer is missing.
	inv = underOuterFilter(t, "run", "--json", script)
	res = Result{}
	if err := json.Unmarshal([]byte(inv.Stdout), &res); err != nil {
		t.Fatalf("auto run: %v\n%s%s", err, inv.Stdout, inv.Stderr)
	}
	if inv.ExitCode != 0 || res.Status != "ok" || res.Stdout != "still contained\n" {
		t.Fatalf("auto run: exit %d status %s stdout %q error %+v", inv.ExitCode, res.Status, res.Stdout, res.Error)
	}
	rp := decodePosture(t, res.Posture)
	if rp.state("network_namespace") != "missing" || rp.state("mount_namespace") != "applied" || rp.state("seccomp") != "applied" {
		t.Fatalf("auto run posture: network %q mount %q seccomp %q", rp.state("network_namespace"), rp.state("mount_namespace"), rp.state("seccomp"))
	}
}
