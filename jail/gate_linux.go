package jail

import (
	"errors"
	"fmt"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/jail/initstage"
)

// The job's pid 1, the init stage, stays the runtime's parent for the
// whole run, and some of its tasks count against the job's bound on
// tasks: the spec carries the guest's own bound, and the jail adds pid 1's
// share wherever it writes it, and reports it (Outcome.InitTasks) for the
// job's peak to leave it out. That share is:
//   - on cgroup v1 and under RLIMIT_NPROC (where no pids cgroup applies),
//     one task (initThread): the init stage's locked thread, the one that
//     joined the job's cgroups through their per-thread task files and took
//     the guest's ids; its other threads are in no cgroup of the job's and
//     keep the namespace's root ids;
//   - on cgroup v2, where the init stage is born in the job's cgroup (or
//     moved into it whole), every thread of its Go runtime: more of them
//     under load, and a small bound refused Go a thread it needed (fatal
//     to the init stage), or left the guest fewer tasks than the job
//     asked. So until the set-up is done the bound leaves the init stage
//     room (initAllowance), and then, before the runtime starts
//     (initstage.Config.AwaitStart), the supervisor counts the init
//     stage's tasks and sets the bound to the job's plus that count
//     (openGate).
// Either way the guest has exactly its own.

// initThread is pid 1's share of the job's tasks where the jail does not
// count it (cgroup v1, RLIMIT_NPROC): its one thread with the guest's ids
// and, on v1, in the job's cgroups.
const initThread = 1

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

// beforeStart is job's limits as its cgroup takes them before the runtime
// starts: the job's bound on tasks plus pid 1's share, its one thread
// where only that joins (cgroup v1), the allowance until the start gate
// counts it where the init stage is in the cgroup whole (v2).
func beforeStart(job *Job) *specs.LinuxResources {
	res := job.Spec.Linux.Resources
	if awaitsStart(job) {
		return withTasks(res, initAllowance)
	}
	return withTasks(res, initThread)
}

// tasksRlimits is rlimits with pid 1's share (initThread) added to
// RLIMIT_NPROC, the bound on the job's tasks of last resort (where no pids
// cgroup applies): it counts the tasks of the guest's uid, and the init
// stage's thread that took the guest's ids is one of them for the whole
// run. The slice is a copy; an unlimited value stays unlimited.
func tasksRlimits(rlimits []specs.POSIXRlimit) []specs.POSIXRlimit {
	out := slices.Clone(rlimits)
	for i, l := range out {
		if l.Type != "RLIMIT_NPROC" {
			continue
		}
		if l.Soft != rlimInfinity {
			out[i].Soft += initThread
		}
		if l.Hard != rlimInfinity {
			out[i].Hard += initThread
		}
	}
	return out
}

// rlimInfinity is RLIM_INFINITY as a spec's rlimit holds it.
const rlimInfinity = ^uint64(0)

// openGate counts the init stage's tasks, pid 1's share from here
// (Outcome.InitTasks), gives the job's cgroup its bound on tasks plus
// them, and lets the init stage start the runtime. A bound it cannot set
// fails the run: the cgroup's holds the allowance. A cgroup without the
// pids controller counts nothing and bounds nothing: the share stays the
// one of RLIMIT_NPROC, which bounds the job then (initThread).
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
