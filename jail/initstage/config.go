package initstage

import (
	"slices"

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
// (never in argv or the environment). Its first fields are the parts of the
// job's OCI runtime spec the init stage acts on, in the spec's own types
// (ConfigFor picks them): decoding the whole spec would cost every run the
// reflection over types the init stage never reads.
type Config struct {
	// Process is what to exec: args, environment, the guest's ids and
	// rlimits.
	Process *specs.Process `json:"process"`
	// Hostname is set in the job's UTS namespace.
	Hostname string `json:"hostname,omitempty"`
	// Mounts build the root on a fresh tmpfs, in order.
	Mounts []specs.Mount `json:"mounts,omitempty"`
	// WritableRoot leaves the root writable (the spec's root is not
	// read-only).
	WritableRoot bool `json:"writable_root,omitempty"`
	// Namespaces are those the child was cloned into.
	Namespaces []specs.LinuxNamespaceType `json:"namespaces,omitempty"`
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
	// CgroupJoin is how many cgroup v1 task files come with the
	// configuration (SCM_RIGHTS): the init stage joins through them before
	// its set-up. 0 when the supervisor placed it.
	CgroupJoin int `json:"cgroup_join,omitempty"`
}

// ConfigFor returns a Config carrying what the init stage uses of spec: the
// process, hostname, mounts, root read-only flag and namespaces.
func ConfigFor(spec *specs.Spec) Config {
	cfg := Config{Process: spec.Process, Hostname: spec.Hostname, Mounts: spec.Mounts,
		WritableRoot: spec.Root != nil && !spec.Root.Readonly}
	if spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			cfg.Namespaces = append(cfg.Namespaces, ns.Type)
		}
	}
	return cfg
}

// HasNamespace reports whether the child was cloned into the namespace t.
func (c *Config) HasNamespace(t specs.LinuxNamespaceType) bool {
	return slices.Contains(c.Namespaces, t)
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
