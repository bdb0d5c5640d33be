package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/proctest"
	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/runtimes"
)

// fakeCgroup hands the init stage task files that are not cgroup files.
type fakeCgroup struct{ t *testing.T }

func (f fakeCgroup) TaskFiles() ([]*os.File, error) {
	file, err := os.CreateTemp(f.t.TempDir(), "tasks")
	if err != nil {
		return nil, err
	}
	return []*os.File{file}, nil
}
func (fakeCgroup) AddProc(int) error                     { return errors.New("fakeCgroup: AddProc must not be called") }
func (fakeCgroup) FD() (int, bool)                       { return -1, false }
func (fakeCgroup) CPUTime() (time.Duration, error)       { return 0, nil }
func (fakeCgroup) Kill() error                           { return nil }
func (fakeCgroup) SetLimits(*specs.LinuxResources) error { return nil }
func (fakeCgroup) Stats() (cgroup.Usage, error)          { return cgroup.Usage{}, nil }
func (fakeCgroup) Delete() error                         { return nil }

// madeBy is a Cgroups whose Make is make; it reserves none.
type madeBy struct {
	make    func() (Cgroup, error)
	atBirth bool
}

func (m madeBy) Make(string, *specs.LinuxResources) (Cgroup, error) { return m.make() }
func (madeBy) Reserve(string) (Cgroup, error)                       { return nil, errors.New("madeBy: no reserve") }
func (m madeBy) AtBirth() bool                                      { return m.atBirth }

// TestRunCgroupJoinFailsClosed: when the init stage cannot join its cgroup
// (here a task file that is no cgroup file), the run ends before the
// program starts, naming the cgroup stage.
func TestRunCgroupJoinFailsClosed(t *testing.T) {
	testenv.RequireRoot(t)
	job := shellJob(t, `echo started`, testLimits)
	job.Cgroups = madeBy{make: func() (Cgroup, error) { return fakeCgroup{t}, nil }, atBirth: true}
	out := Run(context.Background(), job)
	if out.Status != StatusInternalError || out.ExitCode != 125 || out.InitStage != initstage.StageCgroup || strings.Contains(string(out.Stdout), "started") || !strings.Contains(out.Message, "not on a cgroup file system") {
		t.Fatalf("status %s exit %d stage %q message %q stdout %q", out.Status, out.ExitCode, out.InitStage, out.Message, out.Stdout)
	}
}

// newChild returns the one child of this process that proctest.Children(t) did not
// list in before, once there is one.
func newChild(t *testing.T, before []string) (string, bool) {
	for _, pid := range proctest.Children(t) {
		if !slices.Contains(before, pid) {
			return pid, true
		}
	}
	return "", false
}

// TestRunMakesTheCgroupWhileTheRootIsMounted: on cgroup v1 (no
// Cgroups.AtBirth) the job's cgroup is made while the init stage mounts the
// root's file systems, and nothing of the job's is written into the root
// before the join (so the job's own memory is charged to it).
func TestRunMakesTheCgroupWhileTheRootIsMounted(t *testing.T) {
	testenv.RequireRoot(t)
	job := shellJob(t, `read m < /job/marker; printf %s "$m"`, testLimits)
	job.Files = []runtimes.File{{Path: "/job/marker", Data: []byte("marked"), Mode: 0o444}}
	before := proctest.Children(t)
	var waited, written bool
	calls := 0
	job.Cgroups = madeBy{make: func() (Cgroup, error) {
		calls++
		// The init stage's root is /tmp of its own mount namespace until
		// it pivots. Once its /proc is mounted there and its thread sits
		// in recvmsg, it has mounted what it mounts before the join
		// and waits for it.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			pid, ok := newChild(t, before)
			if !ok {
				continue
			}
			root := "/proc/" + pid + "/root/tmp"
			if _, err := os.Lstat(root + "/proc/1"); err != nil {
				continue
			}
			if !inRecvmsg(pid) {
				continue
			}
			waited = true
			_, err := os.Lstat(root + "/job/marker")
			written = err == nil
			break
		}
		return nil, nil
	}}
	out := Run(context.Background(), job)
	if out.Status != StatusOK || string(out.Stdout) != "marked" {
		t.Fatalf("status %s stage %q message %q stdout %q", out.Status, out.InitStage, out.Message, out.Stdout)
	}
	if calls != 1 || !waited || written {
		t.Errorf("Make called %d times; the init stage waited for the join with its root mounted: %t; the job's file written before the join: %t", calls, waited, written)
	}
}

// TestRunJoinsTheCgroupItMade: the cgroup Make returns is the one
// the init stage joins (here task files that are no cgroup files, which
// fail the join closed).
func TestRunJoinsTheCgroupItMade(t *testing.T) {
	testenv.RequireRoot(t)
	job := shellJob(t, `echo started`, testLimits)
	job.Cgroups = madeBy{make: func() (Cgroup, error) { return fakeCgroup{t}, nil }}
	out := Run(context.Background(), job)
	if out.Status != StatusInternalError || out.InitStage != initstage.StageCgroup || strings.Contains(string(out.Stdout), "started") || !strings.Contains(out.Message, "not on a cgroup file system") {
		t.Fatalf("status %s stage %q message %q stdout %q", out.Status, out.InitStage, out.Message, out.Stdout)
	}
}

// TestRunTimeoutWhileTheCgroupIsMade: a wall limit that passes while the
// cgroup is being made ends the run as a timeout, with nothing left.
func TestRunTimeoutWhileTheCgroupIsMade(t *testing.T) {
	testenv.RequireRoot(t)
	job := shellJob(t, `echo started`, testLimits)
	job.Timeout = 50 * time.Millisecond
	before := proctest.Children(t)
	job.Cgroups = madeBy{make: func() (Cgroup, error) {
		time.Sleep(300 * time.Millisecond)
		return nil, nil
	}}
	out := Run(context.Background(), job)
	if out.Status != StatusTimeout || out.ExitCode != 124 || out.InitStage != initstage.StageNone || strings.Contains(string(out.Stdout), "started") {
		t.Fatalf("status %s exit %d stage %q message %q stdout %q", out.Status, out.ExitCode, out.InitStage, out.Message, out.Stdout)
	}
	if left, _ := newChild(t, before); left != "" {
		t.Errorf("child %s left behind", left)
	}
}

// TestRunCgroupNotMadeEndsTheRun: a cgroup that cannot be made ends the run
// at stage "cgroup" before the program starts, with nothing left; Run
// returns only after Make has.
func TestRunCgroupNotMadeEndsTheRun(t *testing.T) {
	testenv.RequireRoot(t)
	for _, atBirth := range []bool{false, true} {
		t.Run(fmt.Sprintf("at birth %t", atBirth), func(t *testing.T) {
			job := shellJob(t, `echo started`, testLimits)
			before := proctest.Children(t)
			var returned atomic.Bool
			var startedFirst bool
			job.Cgroups = madeBy{make: func() (Cgroup, error) {
				_, startedFirst = newChild(t, before)
				time.Sleep(50 * time.Millisecond)
				returned.Store(true)
				return nil, errors.New("no cgroup here")
			}, atBirth: atBirth}
			out := Run(context.Background(), job)
			if !returned.Load() {
				t.Error("Run returned before Make did")
			}
			if atBirth && startedFirst {
				t.Error("a child was started before the cgroup it must be born in")
			}
			if out.Status != StatusInternalError || out.InitStage != initstage.StageCgroup || !strings.Contains(out.Message, "no cgroup here") || strings.Contains(string(out.Stdout), "started") {
				t.Fatalf("status %s stage %q message %q stdout %q", out.Status, out.InitStage, out.Message, out.Stdout)
			}
			if left, _ := newChild(t, before); left != "" {
				t.Errorf("child %s left behind", left)
			}
		})
	}
}
