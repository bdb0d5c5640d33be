package jail

import (
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/jail/initstage"
)

// On cgroup v2 the init stage is born in the job's cgroup (or moved into
// it whole), and every thread of its Go runtime counts against the job's
// bound on tasks for the whole run: more of them under load, and a small
// bound refused Go a thread it needed (fatal to the init stage), or left
// the guest fewer tasks than the job asked. So until the set-up is done
// the bound leaves the init stage room (initAllowance), and then, before
// the runtime starts (initstage.Config.AwaitStart), the supervisor counts
// the init stage's tasks and sets the bound to the job's plus that count:
// the guest has exactly its own. (On cgroup v1 only the init stage's
// thread that joins the job's cgroups counts: InitTasks.)

// initAllowance is the room for the init stage's threads in a job's bound
// on tasks until the start gate counts them; the guest runs only after.
const initAllowance = 64

// tasksCounter is what the start gate needs of a run's cgroup (package
// cgroup's Group has it).
type tasksCounter interface {
	TasksNow() (uint64, error)
	SetTasksLimit(n int64) error
}

// awaitsStart says whether job's init stage holds the runtime's start for
// the supervisor's count: its whole process is in the job's cgroup.
func awaitsStart(job *Job) bool { return job.Cgroups != nil && job.Cgroups.AtBirth() }

// tasksLimit is res's bound on tasks, 0 for none.
func tasksLimit(res *specs.LinuxResources) int64 {
	if res == nil || res.Pids == nil || res.Pids.Limit == nil || *res.Pids.Limit <= 0 {
		return 0
	}
	return *res.Pids.Limit
}

// withTasks is res with its bound on tasks raised by extra (res itself if
// it has none).
func withTasks(res *specs.LinuxResources, extra int64) *specs.LinuxResources {
	limit := tasksLimit(res)
	if limit == 0 || extra == 0 {
		return res
	}
	raised := *res
	pids := *res.Pids
	n := limit + extra
	pids.Limit = &n
	raised.Pids = &pids
	return &raised
}

// beforeStart is job's limits as its cgroup takes them before the start
// gate: with room for the init stage's threads where they count.
func beforeStart(job *Job) *specs.LinuxResources {
	res := job.Spec.Linux.Resources
	if !awaitsStart(job) {
		return res
	}
	return withTasks(res, initAllowance)
}

// openGate counts the init stage's tasks, gives the job's cgroup its
// bound on tasks plus them, and lets the init stage start the runtime.
// A bound it cannot set fails the run: the cgroup's holds the allowance.
func (s *supervision) openGate() error {
	limit := tasksLimit(s.job.Spec.Linux.Resources)
	counter, ok := s.cg().(tasksCounter)
	var err error
	switch {
	case ok:
		var n uint64
		if n, err = counter.TasksNow(); err == nil {
			s.child.initTasks, s.out.InitTasks = n, n
			if limit > 0 {
				err = counter.SetTasksLimit(limit + int64(n))
			}
		}
	case limit > 0:
		err = errors.New("the run's cgroup cannot count its tasks")
	}
	if err != nil && limit > 0 {
		return fmt.Errorf("bound the guest's tasks: %w", err)
	}
	if _, err := s.child.ctl.Write([]byte{initstage.StartByte}); err != nil {
		return fmt.Errorf("start the runtime: %w", err)
	}
	return nil
}
