package job

import (
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/posture"
)

// facts gathers what the run's posture is built from.
func (rn *Runner) facts(r *Resolved, out *jail.Outcome, cgs cgroups, cg *cgroup.Group, filtered bool) posture.RunFacts {
	f := posture.RunFacts{
		Mode:         r.Mode,
		Required:     r.Required,
		Outcome:      out,
		Seccomp:      filtered,
		Cgroup:       cg,
		CgroupReason: cgs.reason,
		Runtime:      string(r.Runtime),
		CoarseTime:   r.Profile.CoarseTime,
	}
	if cgs.mgr != nil {
		f.CgroupHost = cgs.mgr.Host()
	}
	return f
}
