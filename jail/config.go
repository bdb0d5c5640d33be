package jail

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/runtimes"
)

// InitRole is argv[1] of pmjail's own binary when it runs as a job's init
// stage. main dispatches it to Init before anything else.
const InitRole = "__pmjail_init"

// Ids inside the job's user namespace: the init stage runs as root there
// (mapped to an unprivileged host id) and the guest as guestID.
const (
	nsRootID = 0
	guestID  = 1000
)

// initConfig is everything the init stage needs, sent over the control
// socket (never in argv or the environment). Spec carries what the OCI
// runtime spec already describes: the process, hostname, mounts, rlimits.
type initConfig struct {
	Spec *specs.Spec `json:"spec"`
	// Files are written into the root before it is made read-only.
	Files []runtimes.File `json:"files"`
	// Seccomp is the compiled filter, installed last; empty for none.
	Seccomp []byte `json:"seccomp,omitempty"`
	// HostMountNS is the supervisor's mount namespace inode: the init stage
	// refuses to touch mounts unless it is provably elsewhere.
	HostMountNS uint64 `json:"host_mount_ns"`
	// Landlock asks for a Landlock ruleset where the kernel has one.
	Landlock bool `json:"landlock,omitempty"`
	// Channel asks for the guest channel's FIFOs.
	Channel bool `json:"channel,omitempty"`
	// CgroupJoin is how many cgroup task files the init stage must have
	// joined at start-up (see cgroupjoin_linux.go); 0 when the supervisor
	// placed it.
	CgroupJoin int `json:"cgroup_join,omitempty"`
}

// initReport is what the init stage sends back before exec: either the
// layers it applied, or the error that stopped it.
type initReport struct {
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

// Names of the descriptors an init report may carry.
const (
	fdChannelIn  = "channel_in"
	fdChannelOut = "channel_out"
	fdSeccomp    = "seccomp"
)
