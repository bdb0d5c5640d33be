package initstage

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/runtimes"
)

// Role is argv[1] of a binary that runs as a job's init stage: pmjail's
// small pmjail-init, or pmjail itself. Its main dispatches it to Main
// before anything else.
const Role = "__pmjail_init"

// Fds the init stage receives: the guest channel stays at ChannelFD across
// exec (a placeholder holds the slot until then); the control socket, at
// ControlFD, is closed by it.
const (
	ChannelFD = 3
	ControlFD = 4
)

// Config is everything the init stage needs, sent over the control socket
// (never in argv or the environment). Spec carries what the OCI runtime
// spec already describes: the process, hostname, mounts, rlimits and the
// namespaces the child was cloned into.
type Config struct {
	Spec *specs.Spec `json:"spec"`
	// Files are written into the root before it is made read-only.
	Files []runtimes.File `json:"files"`
	// Seccomp is the compiled filter (package bpf), installed last; empty
	// for none.
	Seccomp []byte `json:"seccomp,omitempty"`
	// HostMountNS is the supervisor's mount namespace inode: the init stage
	// refuses to touch mounts unless it is provably elsewhere.
	HostMountNS uint64 `json:"host_mount_ns"`
	// Landlock asks for a Landlock ruleset where the kernel has one.
	Landlock bool `json:"landlock,omitempty"`
	// Channel asks for the guest channel's FIFOs.
	Channel bool `json:"channel,omitempty"`
	// CgroupJoin is how many cgroup task files the init stage must have
	// joined at start-up (see JoinEnv); 0 when the supervisor placed it.
	CgroupJoin int `json:"cgroup_join,omitempty"`
}

// Report is what the init stage sends back before exec: either the layers
// it applied, or the error that stopped it. A second report, after the
// first, means exec itself failed.
type Report struct {
	Error    string `json:"error,omitempty"`
	Stage    string `json:"stage,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	// Landlock is the ABI version enforced, 0 for none.
	Landlock int `json:"landlock,omitempty"`
	// LandlockReason says why Landlock is not enforced.
	LandlockReason string `json:"landlock_reason,omitempty"`
	// FDs names the descriptors passed with the report, in order.
	FDs []string `json:"fds,omitempty"`
	fds []int
}

// Names of the descriptors a report may carry.
const (
	FDChannelIn  = "channel_in"
	FDChannelOut = "channel_out"
	FDSeccomp    = "seccomp"
)

// HasNamespace reports whether spec asks for the namespace t.
func HasNamespace(spec *specs.Spec, t specs.LinuxNamespaceType) bool {
	if spec.Linux == nil {
		return false
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == t {
			return true
		}
	}
	return false
}
