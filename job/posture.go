package job

import (
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/posture"
)

// missingRequired lists the extra layers the operator requires that this
// runner cannot provide, before anything starts.
func (rn *Runner) missingRequired(r *Resolved) []string {
	if r.Mode != ModeRequired {
		return nil
	}
	var missing []string
	for _, l := range r.Required {
		switch l {
		case posture.CgroupMemory, posture.CgroupPids, posture.CgroupCPU:
			if rn.Cgroups == nil || !rn.Cgroups.Host().Has(l[len("cgroup_"):]) {
				missing = append(missing, l)
			}
		}
	}
	return missing
}

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
