package jail

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/cgroup"
)

// Cgroups makes the cgroups of runs. It is the one way a cgroup enters the
// jail: a run makes its own (Make) or adopts its pooled child's (Reserve,
// by the Pool), and from then the jail owns it: it places the child in it,
// kills through it, reads its usage back into the Outcome and removes it
// (Outcome.Release).
type Cgroups interface {
	// Make makes the cgroup of run id with the limits res.
	Make(id string, res *specs.LinuxResources) (Cgroup, error)
	// Reserve makes a cgroup without limits, for a pooled child whose run
	// is not known yet; the run that takes the child gives it its limits
	// (Cgroup.SetLimits).
	Reserve(id string) (Cgroup, error)
	// AtBirth reports whether a child must be born in its run's cgroup
	// (cgroup v2): the cgroup is then made before the child starts, not
	// while it starts.
	AtBirth() bool
}

// Cgroup is one run's cgroup, as the jail drives it.
type Cgroup interface {
	// TaskFiles opens, for writing, the per-thread task file of each of the
	// cgroup's v1 hierarchies: they go to the init stage in its join
	// (initstage.Join), and it joins through them itself, before it writes
	// anything of the job's. An error (cgroup v2) means none.
	TaskFiles() ([]*os.File, error)
	// AddProc moves a process in, when neither FD nor TaskFiles can.
	AddProc(pid int) error
	// FD is the cgroup directory for CLONE_INTO_CGROUP (cgroup v2).
	FD() (int, bool)
	// CPUTime is the CPU time the cgroup's tasks have used so far.
	CPUTime() (time.Duration, error)
	// Kill kills every task in the cgroup.
	Kill() error
	// SetLimits gives a reserved cgroup its run's limits.
	SetLimits(res *specs.LinuxResources) error
	// Stats is the cgroup's accounting of the run.
	Stats() (cgroup.Usage, error)
	// Delete kills what is left in it and removes it.
	Delete() error
}

// madeCgroup is a run's cgroup once made (or adopted), or why not.
type madeCgroup struct {
	cg  Cgroup
	err error
}

// Release removes the run's cgroup, which Run leaves in place for the
// caller to read back (its paths and the limits in its files) once the run
// is over. It returns why the cgroup could not be removed; a second call
// does nothing.
func (o *Outcome) Release() error {
	cg := o.Cgroup
	o.Cgroup = nil
	if cg == nil {
		return nil
	}
	return cg.Delete()
}

// cgroupFD is the cgroup's directory for CLONE_INTO_CGROUP, if it has one
// (cgroup v2).
func cgroupFD(cg Cgroup) (int, bool) {
	if cg == nil {
		return -1, false
	}
	return cg.FD()
}

// reserveID names a pooled child's cgroup: unique among this process's.
func reserveID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
