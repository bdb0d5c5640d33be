//go:build linux && amd64 && cgo

package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

// probeReport is what a spawned child sees of itself.
type probeReport struct {
	UID, GID, PID, PPID, SID int
	Groups                   []int
	UIDMap, GIDMap           string
	Cwd                      string
	SigBlk                   string
	// Fds are the device:inode of fds 0..4, "" when closed.
	Fds       [5]string
	PDeathSig int
}

func fdIdentity(fd int) string {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

func spawnProbe() {
	var r probeReport
	r.UID, r.GID, r.PID, r.PPID = os.Getuid(), os.Getgid(), os.Getpid(), os.Getppid()
	r.SID, _ = unix.Getsid(0)
	r.Groups, _ = os.Getgroups()
	uidMap, _ := os.ReadFile("/proc/self/uid_map")
	gidMap, _ := os.ReadFile("/proc/self/gid_map")
	r.UIDMap, r.GIDMap = normalizeMap(string(uidMap)), normalizeMap(string(gidMap))
	r.Cwd, _ = os.Getwd()
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "SigBlk:"); ok {
			r.SigBlk = strings.TrimSpace(v)
		}
	}
	for fd := range r.Fds {
		r.Fds[fd] = fdIdentity(fd)
	}
	var sig int32
	_, _, errno := unix.Syscall(unix.SYS_PRCTL, unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0)
	if errno == 0 {
		r.PDeathSig = int(sig)
	}
	_ = json.NewEncoder(os.Stdout).Encode(&r)
	os.Exit(0)
}

// spawnParent starts a probe with its fds 3 and 4 crossed over (the
// child's 3 is this process's 4 and the other way round, and the child's
// stdout is this process's 3): every source is another slot's target.
func spawnParent() {
	three, four := os.NewFile(3, "three"), os.NewFile(4, "four")
	exe, _ := os.Executable()
	cmd := &exec.Cmd{Path: exe, Args: []string{exe, spawnProbeRole}, Dir: "/",
		Stdin: os.Stdin, Stdout: three, Stderr: os.Stderr, ExtraFiles: []*os.File{four, three},
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}}
	proc, err := spawnShared(cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	st, err := proc.Wait()
	if err != nil || !st.Success() {
		fmt.Fprintln(os.Stderr, "probe:", st, err)
		os.Exit(3)
	}
	os.Exit(0)
}

// spawnLowFDs starts a missing program with its own fds 0 to 2 closed, so
// that spawnShared's pipes take the lowest numbers and the status pipe's
// write end gets a number among the child's slots. The start must fail,
// saying why. Only stdio is closed: the runtime keeps fds of its own open
// (its netpoller's, and Go 1.25's cgroup CPU limit files), and closing
// those crashes it some time later.
func spawnLowFDs() {
	out, err := os.CreateTemp("", "pmjail-spawn")
	if err != nil {
		os.Exit(2)
	}
	os.Remove(out.Name())
	high, err := unix.FcntlInt(out.Fd(), unix.F_DUPFD_CLOEXEC, 100)
	if err != nil {
		os.Exit(2)
	}
	out.Close()
	f := os.NewFile(uintptr(high), "out")
	for fd := 0; fd <= 2; fd++ {
		unix.Close(fd)
	}
	// The sync pipe takes 0 and 1, the status pipe 2 and the lowest free
	// fd above; the slots reach past that.
	next, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil || next != 0 {
		os.Exit(2)
	}
	unix.Close(next)
	spare, err := unix.FcntlInt(uintptr(high), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		os.Exit(2)
	}
	unix.Close(spare)
	extra := make([]*os.File, spare) // slots 3 .. spare+2
	for i := range extra {
		extra[i] = f
	}
	cmd := &exec.Cmd{Path: "/nonexistent/pmjail-init", Args: []string{"x"}, Dir: "/",
		Stdin: f, Stdout: f, Stderr: f, ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}}
	proc, err := spawnShared(cmd)
	switch {
	case err == nil:
		proc.Wait()
		os.Exit(4) // started a program that is not there
	case !strings.Contains(err.Error(), "exec: no such file or directory"):
		os.Exit(5)
	}
	os.Exit(0)
}

func normalizeMap(m string) string { return strings.Join(strings.Fields(m), " ") }

// newFds lists the fds open now that were not in before (fdTargets): what
// a start left open. (Fds closed meanwhile are other tests' business: a
// Run lets its job's mount namespace go after it returns.)
func newFds(t *testing.T, before map[string]string) []string {
	t.Helper()
	var opened []string
	for fd, target := range fdTargets(t) {
		if before[fd] != target {
			opened = append(opened, fd+" "+target)
		}
	}
	return opened
}

// testLease leases host ids for the test's length.
func testLease(t *testing.T) *idLease {
	t.Helper()
	lease, err := leaseIDs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.release)
	return lease
}

// probeCmd is an init-stage-like command that runs spawnProbe.
func probeCmd(t *testing.T, flags uintptr, lease *idLease) (cmd *exec.Cmd, out *os.File, extra [2]*os.File) {
	t.Helper()
	// The ids it takes cannot search the test binary's directory.
	const exe = "/proc/self/exe"
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	for i := range extra {
		if extra[i], err = os.Create(filepath.Join(dir, strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { extra[i].Close() })
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devNull.Close() })
	cmd = &exec.Cmd{Path: exe, Args: []string{exe, spawnProbeRole}, Env: []string{"GOTRACEBACK=all"}, Dir: "/",
		Stdin: devNull, Stdout: out, Stderr: os.Stderr, ExtraFiles: extra[:], SysProcAttr: childAttr(flags, lease)}
	return cmd, out, extra
}

func readProbe(t *testing.T, out *os.File) probeReport {
	t.Helper()
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	var r probeReport
	if err := json.NewDecoder(out).Decode(&r); err != nil {
		t.Fatalf("probe report: %v", err)
	}
	return r
}

// TestSpawnSharedStartsAsChildAttrSays: a child started without a copy of
// the supervisor's memory gets everything childAttr asks for, as Go's
// start would give it.
func TestSpawnSharedStartsAsChildAttrSays(t *testing.T) {
	testenv.RequireRoot(t)
	lease := testLease(t)
	cmd, out, extra := probeCmd(t, unix.CLONE_NEWUSER|unix.CLONE_NEWPID|unix.CLONE_NEWNS, lease)
	before := fdTargets(t)
	proc, err := spawnShared(cmd)
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
	wantMap := fmt.Sprintf("%d %d 1 %d %d 1", nsRootID, lease.rootID(), guestID, lease.guestID())
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
	devNull := fdIdentityOf(t, os.DevNull)
	want := [5]string{devNull, fdIdentityOf(t, out.Name()), fdIdentity(int(os.Stderr.Fd())),
		fdIdentityOf(t, extra[0].Name()), fdIdentityOf(t, extra[1].Name())}
	if r.Fds != want {
		t.Errorf("child fds 0..4 %v, want %v", r.Fds, want)
	}
	if opened := newFds(t, before); len(opened) != 0 {
		t.Errorf("fds left open: %v", opened)
	}
}

func dumpable(t *testing.T) bool {
	t.Helper()
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d == 1
}

func fdIdentityOf(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// TestSpawnSharedCrossedFds: fds whose numbers are other slots' targets
// land where they were asked to (spawnParent crosses 3 and 4 over).
func TestSpawnSharedCrossedFds(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	a, err := os.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Create(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe, spawnParentRole)
	parent.ExtraFiles = []*os.File{a, b} // its 3 and 4
	if out, err := parent.CombinedOutput(); err != nil {
		t.Fatalf("spawn parent: %v: %s", err, out)
	}
	// The probe's stdout was the parent's 3: file a.
	r := readProbe(t, a)
	want := [5]string{fdIdentityOf(t, os.DevNull), fdIdentityOf(t, a.Name()), r.Fds[2],
		fdIdentityOf(t, b.Name()), fdIdentityOf(t, a.Name())}
	if r.Fds != want {
		t.Errorf("child fds 0..4 %v, want %v", r.Fds, want)
	}
}

// TestSpawnSharedStatusPipeAmongSlots: a status pipe that got one of the
// child's fd numbers still reports the child's failure (spawnLowFDs).
func TestSpawnSharedStatusPipeAmongSlots(t *testing.T) {
	testenv.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(exe, spawnLowFDsRole).CombinedOutput(); err != nil {
		t.Fatalf("%v (2: setting up its fds failed; 4: it started a missing program; 5: another error): %s", err, out)
	}
}

// TestSpawnSharedConcurrent: two starts that both clone before either
// writes its id maps (each child then holds a copy of the other's pipe
// ends), and whose maps both fail, end; so do a good start and a bad one
// side by side. No child is left.
func TestSpawnSharedConcurrent(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name string
		bad  [2]bool
	}{{"both fail", [2]bool{true, true}}, {"one fails", [2]bool{false, true}}} {
		t.Run(tc.name, func(t *testing.T) {
			// Both starts make their pipes, then both clone, then both go on.
			var piped, cloned sync.WaitGroup
			piped.Add(2)
			cloned.Add(2)
			testHookSpawn = func(stage string) {
				at := map[string]*sync.WaitGroup{"pipes": &piped, "cloned": &cloned}[stage]
				at.Done()
				at.Wait()
			}
			defer func() { testHookSpawn = nil }()
			errs := make(chan error, 2)
			for _, bad := range tc.bad {
				cmd, _, _ := probeCmd(t, unix.CLONE_NEWUSER|unix.CLONE_NEWPID, testLease(t))
				if bad {
					attr := cmd.SysProcAttr
					attr.UidMappings = append(attr.UidMappings, attr.UidMappings[0])
				}
				go func() { errs <- spawnOutcome(cmd, bad) }()
			}
			timeout := time.After(20 * time.Second)
			for range 2 {
				select {
				case err := <-errs:
					if err != nil {
						t.Error(err)
					}
				case <-timeout:
					t.Fatal("starts still blocked after 20s")
				}
			}
			if pids := children(t); len(pids) != 0 {
				t.Errorf("children left: %v", pids)
			}
		})
	}
}

// spawnOutcome starts cmd and says what went other than expected: a
// failed start if bad, a probe that exits 0 otherwise.
func spawnOutcome(cmd *exec.Cmd, bad bool) error {
	proc, err := spawnShared(cmd)
	switch {
	case bad && err == nil:
		proc.Kill()
		proc.Wait()
		return errors.New("started with a broken id map")
	case bad:
		return nil
	case err != nil:
		return err
	}
	st, err := proc.Wait()
	if err == nil && !st.Success() {
		err = fmt.Errorf("probe: %v", st)
	}
	return err
}

// TestSpawnSharedFailures: a child that cannot start is reaped, its error
// says which step failed, and nothing of it stays open.
func TestSpawnSharedFailures(t *testing.T) {
	testenv.RequireRoot(t)
	lease := testLease(t)
	for _, tc := range []struct {
		name    string
		breakIt func(*exec.Cmd)
		want    string
	}{
		{"missing program", func(c *exec.Cmd) { c.Path = "/nonexistent/pmjail-init" }, "exec: no such file or directory"},
		{"bad id mapping", func(c *exec.Cmd) {
			c.SysProcAttr.UidMappings = append(c.SysProcAttr.UidMappings, c.SysProcAttr.UidMappings[0])
		}, "write uid_map of the init stage"},
		{"unmapped uid", func(c *exec.Cmd) { c.SysProcAttr.Credential.Uid = 4242 }, "setresuid: invalid argument"},
		{"unsupported attribute", func(c *exec.Cmd) { c.SysProcAttr.Setpgid = true }, "unsupported"},
		{"shared fd table", func(c *exec.Cmd) { c.SysProcAttr.Cloneflags |= unix.CLONE_FILES }, "unsupported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, _, _ := probeCmd(t, unix.CLONE_NEWUSER|unix.CLONE_NEWPID, lease)
			tc.breakIt(cmd)
			before := fdTargets(t)
			proc, err := spawnShared(cmd)
			if err == nil {
				proc.Kill()
				proc.Wait()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			// The child is reaped (other tests' children are not touched).
			if pids := children(t); len(pids) != 0 {
				t.Errorf("children left: %v", pids)
			}
			if opened := newFds(t, before); len(opened) != 0 {
				t.Errorf("fds left open: %v", opened)
			}
		})
	}
}

// BenchmarkStartInitStage starts and reaps a child in new user, pid and
// mount namespaces from a process holding a daemon-sized heap, through
// spawnShared and through Go's start.
func BenchmarkStartInitStage(b *testing.B) {
	testenv.RequireRoot(b)
	// A resident heap the size of an idle daemon's (~15 MiB): what a fork
	// copies.
	ballast := make([]byte, 16<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	defer runtime.KeepAlive(ballast)
	lease, err := leaseIDs()
	if err != nil {
		b.Fatal(err)
	}
	defer lease.release()
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS)
	for _, bc := range []struct {
		name  string
		start func(*exec.Cmd) (*os.Process, error)
	}{
		{"shared", spawnShared},
		{"go", func(c *exec.Cmd) (*os.Process, error) {
			err := startLocked(c)
			return c.Process, err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				cmd := &exec.Cmd{Path: "/bin/true", Args: []string{"true"}, Dir: "/",
					Stdin: os.Stdin, Stdout: os.Stderr, Stderr: os.Stderr, SysProcAttr: childAttr(flags, lease)}
				proc, err := bc.start(cmd)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := proc.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
