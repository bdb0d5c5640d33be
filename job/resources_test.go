package job

import (
	"testing"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/profiles"
)

// TestResourcesOnlyForControllersPresent: a controller the host lacks is
// left out of the job's limits, so that the run goes ahead without that
// layer (its posture says so) instead of failing to create its cgroup.
func TestResourcesOnlyForControllersPresent(t *testing.T) {
	lim := profiles.Limits{Memory: 64 << 20, Pids: 16}
	all := resources(lim, &cgroup.Host{Controllers: []string{cgroup.Memory, cgroup.Pids, cgroup.CPU}})
	if all.Memory == nil || *all.Memory.Limit != 64<<20 || *all.Memory.Swap != 64<<20 ||
		all.Pids == nil || *all.Pids.Limit != 16 || all.CPU == nil || *all.CPU.Quota != 100000 {
		t.Fatalf("every controller present: %+v", all)
	}
	// The bound is the guest's own on either cgroup version: the jail adds
	// its pid 1's share (jail.Outcome.InitTasks).
	for _, mode := range []cgroup.Mode{cgroup.V1, cgroup.V2} {
		if r := resources(lim, &cgroup.Host{Mode: mode, Controllers: []string{cgroup.Pids}}); r.Pids == nil || *r.Pids.Limit != 16 {
			t.Errorf("%s: pids %+v, want the job's 16", mode, r.Pids)
		}
	}
	some := resources(lim, &cgroup.Host{Controllers: []string{cgroup.Memory, cgroup.CPUAcct, cgroup.Freezer}})
	if some.Memory == nil || some.Pids != nil || some.CPU != nil {
		t.Errorf("memory alone: memory %v pids %v cpu %v", some.Memory, some.Pids, some.CPU)
	}
}
