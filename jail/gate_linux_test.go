package jail

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// birthCgroups is a Cgroups provider that only says whether a child is
// born in its cgroup (cgroup v2) or joins it (v1): what beforeStart asks.
type birthCgroups struct {
	Cgroups
	v2 bool
}

func (b birthCgroups) AtBirth() bool { return b.v2 }

// TestBeforeStartAddsPid1Share: the spec carries the guest's own bound on
// tasks, and the cgroup takes it plus pid 1's share: its one thread where
// only that joins the cgroup (v1), room for all its threads until the
// start gate counts them where it is born there (v2). A spec without a
// bound stays without one, and the job's own spec is left as it was.
func TestBeforeStartAddsPid1Share(t *testing.T) {
	for _, c := range []struct {
		v2   bool
		want int64
	}{{false, 16 + initThread}, {true, 16 + initAllowance}} {
		n := int64(16)
		job := &Job{Spec: &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &n}}}}, Cgroups: birthCgroups{v2: c.v2}}
		if got := tasksLimit(beforeStart(job)); got != c.want {
			t.Errorf("cgroup v2 %v: the cgroup's bound before the start is %d, want %d", c.v2, got, c.want)
		}
		if n != 16 || *job.Spec.Linux.Resources.Pids.Limit != 16 {
			t.Errorf("cgroup v2 %v: the job's spec now says %d tasks", c.v2, *job.Spec.Linux.Resources.Pids.Limit)
		}
		job.Spec.Linux.Resources = &specs.LinuxResources{}
		if got := beforeStart(job); got.Pids != nil {
			t.Errorf("cgroup v2 %v: a job without a bound on tasks gets %d", c.v2, *got.Pids.Limit)
		}
	}
}

// TestConfigForAddsPid1ShareToNproc: where RLIMIT_NPROC bounds the job's
// tasks (no pids cgroup), the init stage gets the guest's bound plus pid
// 1's thread, which has the guest's ids for the whole run; the job's spec
// keeps the guest's own, the other rlimits are as the spec says, and an
// unlimited one stays unlimited.
func TestConfigForAddsPid1ShareToNproc(t *testing.T) {
	rlimits := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Soft: 64, Hard: 64},
		{Type: "RLIMIT_NPROC", Soft: 4, Hard: 8},
	}
	job := &Job{Spec: &specs.Spec{
		Process: &specs.Process{Args: []string{"/bin/true"}, Rlimits: rlimits},
		Linux:   &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.UserNamespace}}},
	}}
	cfg := configFor(job, &child{}, 0)
	want := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Soft: 64, Hard: 64},
		{Type: "RLIMIT_NPROC", Soft: 4 + initThread, Hard: 8 + initThread},
	}
	if got := cfg.Process.Rlimits; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("the init stage's rlimits %+v, want %+v", got, want)
	}
	if r := job.Spec.Process.Rlimits[1]; r.Soft != 4 || r.Hard != 8 {
		t.Errorf("the job's spec now says RLIMIT_NPROC %d/%d", r.Soft, r.Hard)
	}
	job.Spec.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Soft: 4, Hard: rlimInfinity}}
	if got := configFor(job, &child{}, 0).Process.Rlimits[0]; got.Soft != 4+initThread || got.Hard != rlimInfinity {
		t.Errorf("RLIMIT_NPROC 4/unlimited became %d/%d", got.Soft, got.Hard)
	}
}
