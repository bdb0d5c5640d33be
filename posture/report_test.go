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
