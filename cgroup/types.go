package cgroup

import (
	"errors"
	"slices"
	"time"
)

// ErrNotSupported is the one reason a cgroup layer may be absent: the host
// lacks the mechanic or controller, or it cannot be written from here.
var ErrNotSupported = errors.New("cgroup: not supported on this host")

// Mode is the layout of the host's cgroups.
type Mode int

const (
	// Unavailable: no usable cgroup hierarchy.
	Unavailable Mode = iota
	// V1: legacy or hybrid layout; each controller has its own hierarchy.
	V1
	// V2: the unified hierarchy at /sys/fs/cgroup.
	V2
)

func (m Mode) String() string {
	switch m {
	case V1:
		return "v1"
	case V2:
		return "v2"
	default:
		return "unavailable"
	}
}

// Controller names as reported in Host.Controllers. On v2, "freezer" means
// cgroup.freeze, the core freezer of the unified hierarchy.
const (
	Memory  = "memory"
	Pids    = "pids"
	CPU     = "cpu"
	CPUAcct = "cpuacct"
	Freezer = "freezer"
)

// UnifiedKey is the key of Host.Parent and Job.Paths for the single v2
// directory.
const UnifiedKey = ""

// Host describes what Probe proved about this host's cgroups.
type Host struct {
	Mode Mode
	// Controllers usable for jobs, in a fixed order: memory, pids, cpu,
	// cpuacct (v1 only; v2 always has cpu.stat), freezer.
	Controllers []string
	// Parent is where job cgroups are created: controller -> absolute
	// directory on v1; UnifiedKey -> absolute directory on v2.
	Parent map[string]string
	// SwapCapped reports that swap can be capped (memory.memsw.* on v1,
	// memory.swap.max on v2). Without it a memory limit still bounds RAM,
	// but a host with swap may let a job page out beyond it.
	SwapCapped bool
	// Kill reports cgroup.kill (v2, Linux 5.14+): the whole tree dies in
	// one write. Otherwise Kill freezes and signals each task.
	Kill bool
	// Reason says why the mode is Unavailable or a controller is missing.
	Reason string

	// v1Root is, per v1 controller, the directory containerd's cgroup1
	// expects as root (it finds the controller at <root>/<name>).
	v1Root map[string]string
}

// Has reports whether controller c is usable.
func (h *Host) Has(c string) bool { return slices.Contains(h.Controllers, c) }

// Usage is a job's resource use, read from its cgroup.
type Usage struct {
	// MemoryPeakBytes is the kernel's high-water mark (memory.max_usage_in_bytes
	// on v1, memory.peak on v2 5.19+); without it, the highest current usage
	// seen by Stats and CPUTime calls.
	MemoryPeakBytes uint64
	// CPUTime is user+system time of every task ever in the job.
	CPUTime time.Duration
	// PidsPeak is pids.peak when the kernel offers it, else the highest
	// pids.current seen by Stats and CPUTime calls.
	PidsPeak uint64
	// OOMKills counts tasks the OOM killer killed in the job.
	OOMKills uint64
	// MemoryLimitHit: usage reached the memory limit at least once.
	MemoryLimitHit bool
	// PidsLimitHit: a fork or clone was refused by the pids limit.
	PidsLimitHit bool
}
