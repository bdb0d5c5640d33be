package job

import (
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
)

// missingRequired lists the layers mode required insists on that this
// runner cannot provide before anything starts.
func (rn *Runner) missingRequired(r *Resolved) []string {
	if r.Mode != ModeRequired {
		return nil
	}
	var missing []string
	for _, l := range r.Required {
		switch l {
		case "cgroup_memory", "cgroup_pids", "cgroup_cpu":
			if rn.Cgroups == nil || !rn.Cgroups.Host().Has(l[len("cgroup_"):]) {
				missing = append(missing, l)
			}
		}
	}
	return missing
}

// posture is the run's posture (filled in by package posture).
func (rn *Runner) posture(r *Resolved, out *jail.Outcome, cg *cgroup.Job, missing []string) any {
	m := map[string]any{"mode": r.Mode}
	if out != nil {
		m["observed"] = out.Observed
		m["landlock"] = out.Landlock
	}
	return m
}
