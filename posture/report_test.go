package posture

import (
	"slices"
	"testing"
)

func layers(states map[string]State) []Layer {
	var ls []Layer
	for _, n := range Names {
		st, ok := states[n]
		if !ok {
			st = Applied
		}
		ls = append(ls, Layer{Name: n, State: st})
	}
	return ls
}

func TestDecide(t *testing.T) {
	all := &Probed{Layers: layers(nil)}
	if r := all.Report("required", []string{CgroupMemory, Landlock}); r.Decision != "run" || len(r.Missing) != 0 {
		t.Fatalf("every layer applied: %s %v", r.Decision, r.Missing)
	}
	noNet := &Probed{Layers: layers(map[string]State{NetNS: Missing, CgroupMemory: Degraded, Timing: Off})}
	if r := noNet.Report("auto", nil); r.Decision != "run" {
		t.Fatalf("auto must run with a layer missing: %s", r.Decision)
	}
	r := noNet.Report("required", nil)
	if r.Decision != "refuse" || !slices.Equal(r.Missing, []string{NetNS}) {
		t.Fatalf("required without the network namespace: %s %v", r.Decision, r.Missing)
	}
	// A degraded layer counts as missing when the operator requires it.
	r = noNet.Report("required", []string{CgroupMemory})
	if r.Decision != "refuse" || !slices.Equal(r.Missing, []string{NetNS, CgroupMemory}) {
		t.Fatalf("required + cgroup_memory: %s %v", r.Decision, r.Missing)
	}
	if !noNet.Has(PIDNS) || noNet.Has(NetNS) || noNet.Has(CgroupMemory) {
		t.Fatal("Has must be true for applied layers only")
	}
}

func TestMemberOf(t *testing.T) {
	v1 := []string{"8:pids:/pmjail-1-a", "4:memory:/svc/pmjail-1-a", "2:cpu,cpuacct:/pmjail-1-a", "1:name=systemd:/", "0::/"}
	for _, c := range []struct {
		lines  []string
		ctl    string
		dir    string
		v2     bool
		want   bool
		wantAt string
	}{
		{v1, "memory", "/sys/fs/cgroup/memory/svc/pmjail-1-a", false, true, "/svc/pmjail-1-a"},
		{v1, "cpu", "/sys/fs/cgroup/cpu,cpuacct/pmjail-1-a", false, true, "/pmjail-1-a"},
		{v1, "pids", "/sys/fs/cgroup/pids/pmjail-1-b", false, false, "/pmjail-1-a"},
		{v1, "freezer", "/sys/fs/cgroup/freezer/pmjail-1-a", false, false, ""},
		{v1, "memory", "/sys/fs/cgroup/unified/pmjail-1-a", true, false, "/"},
		{[]string{"0::/svc/jobs/pmjail-1-a"}, "memory", "/sys/fs/cgroup/svc/jobs/pmjail-1-a", true, true, "/svc/jobs/pmjail-1-a"},
		{[]string{"0::/svc/sup"}, "pids", "/sys/fs/cgroup/svc/jobs/pmjail-1-a", true, false, "/svc/sup"},
	} {
		at, ok := memberOf(c.lines, c.ctl, c.dir, c.v2)
		if ok != c.want || at != c.wantAt {
			t.Errorf("memberOf(%v, %s, %s, v2=%v) = %q, %v; want %q, %v", c.lines, c.ctl, c.dir, c.v2, at, ok, c.wantAt, c.want)
		}
	}
}
