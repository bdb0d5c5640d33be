//go:build linux && amd64 && cgo

package jail

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary's roles for spawnShared's tests: the child it starts
// (spawnProbe), and a parent whose fds 3 and 4 the test chose
// (spawnParent).
const (
	spawnProbeRole  = "__spawn_probe"
	spawnParentRole = "__spawn_parent"
)

// probeReport is what a spawned child sees of itself.
type probeReport struct {
	UID, GID, PID, PPID, SID int
	Groups                   []int
	UIDMap, GIDMap           string
	Cwd                      string
	SigBlk                   string
	// Fds are the device:inode of fds 0..4, "" when closed.
	Fds [5]string
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
		Stdout: three, Stderr: os.Stderr, ExtraFiles: []*os.File{four, three},
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

func normalizeMap(m string) string { return strings.Join(strings.Fields(m), " ") }

// openFds counts this process's open fds.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
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
	cmd = &exec.Cmd{Path: exe, Args: []string{exe, spawnProbeRole}, Env: []string{"GOTRACEBACK=all"}, Dir: "/",
		Stdout: out, Stderr: os.Stderr, ExtraFiles: extra[:], SysProcAttr: childAttr(flags, lease)}
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
	needRoot(t)
	lease, err := leaseIDs()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.release()
	cmd, out, extra := probeCmd(t, unix.CLONE_NEWUSER|unix.CLONE_NEWPID|unix.CLONE_NEWNS, lease)
	before := openFds(t)
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
	devNull := fdIdentityOf(t, os.DevNull)
	want := [5]string{devNull, fdIdentityOf(t, out.Name()), fdIdentity(int(os.Stderr.Fd())),
		fdIdentityOf(t, extra[0].Name()), fdIdentityOf(t, extra[1].Name())}
	if r.Fds != want {
		t.Errorf("child fds 0..4 %v, want %v", r.Fds, want)
	}
	if after := openFds(t); after != before {
		t.Errorf("open fds %d before, %d after", before, after)
	}
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
	needRoot(t)
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

// TestSpawnSharedFailures: a child that cannot start is reaped, its error
// says which step failed, and nothing of it stays open.
func TestSpawnSharedFailures(t *testing.T) {
	needRoot(t)
	lease, err := leaseIDs()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.release()
	for _, tc := range []struct {
		name    string
		breakIt func(*exec.Cmd)
		want    string
	}{
		{"missing program", func(c *exec.Cmd) { c.Path = "/nonexistent/pmjail-init" }, "exec: no such file or directory"},
		{"bad id mapping", func(c *exec.Cmd) {
			c.SysProcAttr.UidMappings = append(c.SysProcAttr.UidMappings, c.SysProcAttr.UidMappings[0])
		}, "write uid_map of the init stage"},
		{"unsupported attribute", func(c *exec.Cmd) { c.SysProcAttr.Setpgid = true }, "unsupported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, _, _ := probeCmd(t, unix.CLONE_NEWUSER|unix.CLONE_NEWPID, lease)
			tc.breakIt(cmd)
			before := openFds(t)
			proc, err := spawnShared(cmd)
			if err == nil {
				proc.Kill()
				proc.Wait()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			// No child of this test is left, reaped or not.
			if _, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); err != unix.ECHILD {
				t.Errorf("wait4 after the failure: %v, want ECHILD", err)
			}
			if after := openFds(t); after != before {
				t.Errorf("open fds %d before, %d after", before, after)
			}
		})
	}
}

// BenchmarkStartInitStage starts and reaps a child in new user, pid and
// mount namespaces from a process holding a daemon-sized heap, through
// spawnShared and through Go's start.
func BenchmarkStartInitStage(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
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
		{"go", func(c *exec.Cmd) (*os.Process, error) { return c.Process, startLocked(c) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				cmd := &exec.Cmd{Path: "/bin/true", Args: []string{"true"}, Dir: "/",
					Stdout: os.Stderr, Stderr: os.Stderr, SysProcAttr: childAttr(flags, lease)}
				proc, err := bc.start(cmd)
				if err != nil {
					b.Fatal(err)
				}
				if proc == nil {
					proc = cmd.Process
				}
				if _, err := proc.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
