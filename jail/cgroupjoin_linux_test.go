package jail

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
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
func (fakeCgroup) AddProc(int) error               { return errors.New("fakeCgroup: AddProc must not be called") }
func (fakeCgroup) FD() (int, bool)                 { return -1, false }
func (fakeCgroup) CPUTime() (time.Duration, error) { return 0, nil }
func (fakeCgroup) Kill() error                     { return nil }

// TestRunCgroupJoinFailsClosed: when the init stage cannot join its cgroup
// (here a task file that is no cgroup file), the run ends before the
// program starts, naming the cgroup stage.
func TestRunCgroupJoinFailsClosed(t *testing.T) {
	needRoot(t)
	job := shellJob(t, `echo started`, testLimits)
	job.Cgroup = fakeCgroup{t}
	out := Run(context.Background(), job)
	if out.Status != StatusInternalError || out.ExitCode != 125 || out.InitStage != "cgroup" || strings.Contains(string(out.Stdout), "started") || !strings.Contains(out.Message, "not on a cgroup file system") {
		t.Fatalf("status %s exit %d stage %q message %q stdout %q", out.Status, out.ExitCode, out.InitStage, out.Message, out.Stdout)
	}
}
