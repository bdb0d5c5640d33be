package job

import (
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/posture"
)

// facts gathers what the run's posture is built from.
func (rn *Runner) facts(r *Resolved, out *jail.Outcome, cg *cgroup.Job, filtered bool) posture.RunFacts {
	f := posture.RunFacts{
		Mode:         r.Mode,
		Required:     r.Required,
		Outcome:      out,
		Seccomp:      filtered,
		Cgroup:       cg,
		CgroupReason: rn.CgroupReason,
		Runtime:      string(r.Runtime),
		CoarseTime:   r.Profile.CoarseTime,
	}
	if rn.Cgroups != nil {
		f.CgroupHost = rn.Cgroups.Host()
	}
	return f
}
