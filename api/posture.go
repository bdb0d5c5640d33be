package api

import (
	"slices"
	"strings"
	"time"
)

// Posture is a posture: the host's (GET /v1/posture) or a run's, attached
// to its result, in full or as a summary (Job.Posture).
type Posture struct {
	Mode string `json:"mode"`
	// Decision is "run" or "refuse".
	Decision string `json:"decision"`
	// Missing names the layers the mode requires that are not applied.
	Missing []string `json:"missing,omitempty"`
	// AppliedLayers names the applied layers: set in a summary only,
	// where Layers is not.
	AppliedLayers []string `json:"applied,omitempty"`
	// Layers is every layer with its state and evidence: in a full
	// posture only.
	Layers []Layer `json:"layers,omitempty"`
	// Cgroup is the cgroup mechanic; in a full posture only.
	Cgroup *Cgroup `json:"cgroup,omitempty"`
	Host   *Host   `json:"host,omitempty"`
	// Runtime is what ran, for a run's posture.
	Runtime *RunRuntime `json:"runtime,omitempty"`
	// Observed is the run's process state as read back from /proc.
	Observed *Observed `json:"observed,omitempty"`
	ProbedAt time.Time `json:"probed_at,omitzero"`
	// Notes are the host probe's caveats: a probe that could not finish,
	// a layer proven before that a later probe failed to prove again.
	Notes []string `json:"notes,omitempty"`
}

// State is a layer's state on a host or in a run.
type State string

// The states of a layer.
const (
	StateApplied  State = "applied"
	StateMissing  State = "missing"
	StateDegraded State = "degraded"
	StateOff      State = "off" // available but not asked for (e.g. the timing mitigation)
)

// Layer is one hardening layer's state, with the evidence or the reason.
type Layer struct {
	Name   string `json:"name"`
	State  State  `json:"state"`
	Core   bool   `json:"core,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Cgroup is the cgroup mechanic in use.
type Cgroup struct {
	// Mechanic is "v1", "v2" or "none".
	Mechanic string            `json:"mechanic"`
	Paths    map[string]string `json:"paths,omitempty"`
	Reason   string            `json:"reason,omitempty"`
}

// Host is what the host offers the jail.
type Host struct {
	Kernel string `json:"kernel"`
	// Privileged: the supervisor runs as root with CAP_SYS_ADMIN, which
	// every layer needs.
	Privileged     bool              `json:"privileged"`
	Sysctls        map[string]string `json:"sysctls,omitempty"`
	SeccompActions []string          `json:"seccomp_actions,omitempty"`
	LandlockABI    int               `json:"landlock_abi"`
	Runtimes       []HostRuntime     `json:"runtimes,omitempty"`
}

// HostRuntime is a guest runtime found on the host.
type HostRuntime struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	// Start is how Python starts: "snapshot" or "cold: <why>".
	Start  string `json:"start,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// RunRuntime names a run's runtime and, for Python, how it started:
// "snapshot" or "cold: <why>".
type RunRuntime struct {
	Name  string `json:"name"`
	Start string `json:"start,omitempty"`
}

// Observed is a run's process state as read back from /proc.
type Observed struct {
	PID            int               `json:"pid"`
	NoNewPrivs     bool              `json:"no_new_privs"`
	Seccomp        int               `json:"seccomp_mode"`
	SeccompFilters int               `json:"seccomp_filters"`
	CapEff         string            `json:"cap_eff"`
	CapPrm         string            `json:"cap_prm"`
	CapInh         string            `json:"cap_inh"`
	CapBnd         string            `json:"cap_bnd"`
	CapAmb         string            `json:"cap_amb"`
	HostUID        int               `json:"host_uid"`
	HostGID        int               `json:"host_gid"`
	Namespaces     map[string]bool   `json:"namespaces"`
	NamespaceIDs   map[string]uint64 `json:"namespace_inodes"`
	Cgroups        []string          `json:"cgroups,omitempty"`
	// RootReadOnly and Mounts describe the process's mount table.
	RootReadOnly bool `json:"root_read_only"`
	Mounts       int  `json:"mounts"`
	// CoreLimit and NoFileLimit are its RLIMIT_CORE and RLIMIT_NOFILE.
	CoreLimit   string `json:"rlimit_core"`
	NoFileLimit string `json:"rlimit_nofile"`
	// Network is what the process's network namespace holds.
	Network *Network `json:"network,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Network says whether a process is isolated from the host's network.
type Network struct {
	// Isolated is true when the process has a network namespace of its
	// own (a different inode from the supervisor's) holding only "lo".
	Isolated bool `json:"isolated"`
	// HostInode and JobInode identify the supervisor's and the job's
	// network namespaces (the inode of /proc/<pid>/ns/net).
	HostInode uint64 `json:"host_inode"`
	JobInode  uint64 `json:"job_inode"`
	// Interfaces are the links inside the job's namespace.
	Interfaces []Interface `json:"interfaces"`
	// Reason explains a report that is not isolated.
	Reason string `json:"reason,omitempty"`
}

// Interface is one network link.
type Interface struct {
	Name string `json:"name"`
	Up   bool   `json:"up"`
}

// Layer returns the named layer of a full posture.
func (p *Posture) Layer(name string) (Layer, bool) {
	for _, l := range p.Layers {
		if l.Name == name {
			return l, true
		}
	}
	return Layer{}, false
}

// Applied reports whether the named layer is applied, in a full posture
// or a summary.
func (p *Posture) Applied(name string) bool {
	if l, ok := p.Layer(name); ok {
		return l.State == StateApplied
	}
	return slices.Contains(p.AppliedLayers, name)
}

// Summary returns the summary of a full posture: the mode, the decision,
// and the names of the missing and applied layers.
func (p *Posture) Summary() *Posture {
	s := &Posture{Mode: p.Mode, Decision: p.Decision, Missing: p.Missing, AppliedLayers: p.AppliedLayers}
	if s.AppliedLayers == nil {
		for _, l := range p.Layers {
			if l.State == StateApplied {
				s.AppliedLayers = append(s.AppliedLayers, l.Name)
			}
		}
	}
	return s
}

// NoCapabilities reports whether every capability set is empty.
func (o *Observed) NoCapabilities() bool {
	for _, c := range []string{o.CapEff, o.CapPrm, o.CapInh, o.CapBnd, o.CapAmb} {
		if strings.Trim(c, "0") != "" {
			return false
		}
	}
	return true
}
