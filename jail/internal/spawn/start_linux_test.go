package spawn

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/proctest"
	"github.com/pmjail/pmjail/internal/testenv"
)

// starts are the ways a child can be started: the shared start where this
// build has it, Go's start, and Start, which picks.
var starts = []struct {
	name  string
	start func(*exec.Cmd) (*os.Process, error)
}{
	{"shared", startShared},
	{"go", func(c *exec.Cmd) (*os.Process, error) { return c.Process, startLocked(c) }},
	{"Start", func(c *exec.Cmd) (*os.Process, error) {
		proc, _, err := Start(c)
		return proc, err
	}},
}

// TestSpawnStartsAsAttrSays: a child gets everything its SysProcAttr asks
// for, through each start, and nothing of the start stays open.
func TestSpawnStartsAsAttrSays(t *testing.T) {
	testenv.RequireRoot(t)
	for _, s := range starts {
		t.Run(s.name, func(t *testing.T) {
			if s.name == "shared" && !canStartShared {
				t.Skip("this build starts through Go only")
			}
			cmd, out, extra := probeCmd(t, unix.CLONE_NEWUSER|unix.CLONE_NEWPID|unix.CLONE_NEWNS)
			before := proctest.FDTargets(t)
			proc, err := s.start(cmd)
			if err != nil {
				t.Fatal(err)
			}
			st, err := proc.Wait()
			if err != nil || !st.Success() {
				t.Fatalf("probe: %v %v", st, err)
			}
			r := readProbe(t, out)
			if r.UID != nsRootID || r.GID != nsRootID || len(r.Groups) != 0 {
				t.Errorf("ids %d/%d groups %v, want %d/%d and none", r.UID, r.GID, r.Groups, nsRootID, nsRootID)
			}
			wantMap := fmt.Sprintf("%d %d 1 %d %d 1", nsRootID, hostRootID, nsGuestID, hostGuest)
			if r.UIDMap != wantMap || r.GIDMap != wantMap {
				t.Errorf("uid_map %q gid_map %q, want %q", r.UIDMap, r.GIDMap, wantMap)
			}
			if r.PID != 1 || r.PPID != 0 {
				t.Errorf("pid %d ppid %d, want 1 and 0 (a new pid namespace)", r.PID, r.PPID)
			}
			if r.SID != r.PID {
				t.Errorf("session %d, want its own (%d)", r.SID, r.PID)
			}
			if r.Cwd != "/" {
				t.Errorf("cwd %q, want /", r.Cwd)
			}
			if strings.Trim(r.SigBlk, "0") != "" {
				t.Errorf("signals blocked at exec: %s", r.SigBlk)
			}
			if r.PDeathSig != int(unix.SIGKILL) {
				t.Errorf("parent-death signal %d, want SIGKILL", r.PDeathSig)
			}
			if !dumpable(t) {
				t.Error("this process no longer dumpable after the child changed its ids")
			}
			want := [5]string{fdIdentityOf(t, os.DevNull), fdIdentityOf(t, out.Name()), fdIdentity(int(os.Stderr.Fd())),
				fdIdentityOf(t, extra[0].Name()), fdIdentityOf(t, extra[1].Name())}
			if r.Fds != want {
				t.Errorf("child fds 0..4 %v, want %v", r.Fds, want)
			}
			if opened := newFds(t, before); len(opened) != 0 {
				t.Errorf("fds left open: %v", opened)
			}
		})
	}
}

// TestSpawnClone3Refused: in a process refused clone3 (refusedClone3),
// Start falls back to clone, says the child is not in its cgroup, and
// starts again after.
func TestSpawnClone3Refused(t *testing.T) {
	testenv.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	notCgroup, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer notCgroup.Close()
	cmd := exec.Command(exe, noClone3Role)
	cmd.ExtraFiles = []*os.File{notCgroup} // its 3
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v (%d: set-up, %d: start, %d: born in the cgroup, %d: refusal not remembered, %d: child failed, %d: second start): %s",
			err, refusedSetUp, refusedStart, refusedInCgroup, refusedForgot, refusedChild, refusedSecondFail, out)
	}
}
