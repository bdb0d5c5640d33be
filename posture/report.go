package posture

import (
	"slices"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
)

// State is a layer's state on a host or in a run.
type State = api.State

// The states of a layer.
const (
	Applied  = api.StateApplied
	Missing  = api.StateMissing
	Degraded = api.StateDegraded
	Off      = api.StateOff // available but not asked for (e.g. the timing mitigation)
)

// Layer names: stable, used in reports, in the operator's "required" list
// and in refusals.
const (
	UserNS          = "user_namespace"
	PIDNS           = "pid_namespace"
	MountNS         = "mount_namespace"
	NetNS           = "network_namespace"
	IPCNS           = "ipc_namespace"
	UTSNS           = "uts_namespace"
	CgroupNS        = "cgroup_namespace"
	Rootfs          = "rootfs"
	Seccomp         = "seccomp"
	NoNewPrivs      = "no_new_privs"
	Capabilities    = "capabilities"
	Rlimits         = "rlimits"
	CgroupMemory    = "cgroup_memory"
	CgroupPids      = "cgroup_pids"
	CgroupCPU       = "cgroup_cpu"
	Landlock        = "landlock"
	DenoPermissions = "deno_permissions"
	Timing          = "timing_mitigation"
)

// Core is the containment core mode required insists on.
var Core = []string{MountNS, Rootfs, NetNS, Seccomp, NoNewPrivs, Capabilities}

// Names lists every layer in report order.
var Names = []string{UserNS, PIDNS, MountNS, NetNS, IPCNS, UTSNS, CgroupNS, Rootfs, Seccomp,
	NoNewPrivs, Capabilities, Rlimits, CgroupMemory, CgroupPids, CgroupCPU, Landlock, DenoPermissions, Timing}

// Layer is one hardening layer's state, with the evidence or the reason.
type Layer = api.Layer

// Report is a posture: the host's (pmjail posture, the daemon) or a run's
// (attached to every result as its api.Posture, see API).
type Report struct {
	Mode string `json:"mode"`
	// Decision is "run" or "refuse".
	Decision string `json:"decision"`
	// Missing names the layers the mode requires that are not applied.
	Missing []string `json:"missing,omitempty"`
	Layers  []Layer  `json:"layers"`
	Cgroup  Cgroup   `json:"cgroup"`
	Host    *Host    `json:"host,omitempty"`
	// Runtime is what ran, for a run's posture.
	Runtime *RunRuntime `json:"runtime,omitempty"`
	// Observed is the run's process state as read back from /proc.
	Observed *jail.Observed `json:"observed,omitempty"`
	ProbedAt time.Time      `json:"probed_at,omitzero"`
	// Notes are the host probe's caveats: a probe that could not finish,
	// a layer proven before that a later probe failed to prove again.
	Notes []string `json:"notes,omitempty"`
}

// RunRuntime names a run's runtime and, for Python, how it started.
type RunRuntime = api.RunRuntime

// Cgroup is the cgroup mechanic in use.
type Cgroup = api.Cgroup

// Layer returns the named layer of the report.
func (r *Report) Layer(name string) (Layer, bool) {
	for _, l := range r.Layers {
		if l.Name == name {
			return l, true
		}
	}
	return Layer{}, false
}

// Applied reports whether the named layer is applied.
func (r *Report) Applied(name string) bool {
	l, ok := r.Layer(name)
	return ok && l.State == Applied
}

// decide fills Mode, Decision and Missing: auto always runs; required runs
// only when the core and the operator's extra layers are applied.
func (r *Report) decide(mode string, extra []string) {
	r.Mode = mode
	r.Decision = "run"
	r.Missing = nil
	if mode != "required" {
		return
	}
	for _, name := range append(append([]string(nil), Core...), extra...) {
		if !r.Applied(name) && !slices.Contains(r.Missing, name) {
			r.Missing = append(r.Missing, name)
		}
	}
	if len(r.Missing) > 0 {
		r.Decision = "refuse"
	}
}

func isCore(name string) bool { return slices.Contains(Core, name) }

// API returns the report as the socket contract carries it in a result:
// in full, or as its summary (api.PostureSummary). The full form is the
// report's own JSON, member for member.
func (r *Report) API(detail string) *api.Posture {
	cg := r.Cgroup
	p := &api.Posture{Mode: r.Mode, Decision: r.Decision, Missing: r.Missing, Layers: r.Layers,
		Cgroup: &cg, Host: r.Host, Runtime: r.Runtime, Observed: r.Observed, ProbedAt: r.ProbedAt, Notes: r.Notes}
	if detail == api.PostureSummary {
		return p.Summary()
	}
	return p
}
