package spawn

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/proctest"
)

// The ids the tests' user namespaces map, as jail's init stage does: the
// namespace's root and its guest, each to one host id. The host ids lie
// just below jail's lease range, so that no job of a pmjail running
// beside the tests has them.
const (
	nsRootID   = 0
	nsGuestID  = 1000
	hostRootID = 1<<30 - 2
	hostGuest  = 1<<30 - 1
)

// testAttr is what jail asks of an init stage's start (its childAttr):
// the namespaces flags, the id mappings, a new session without a terminal
// and death with the supervisor.
func testAttr(flags uintptr) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Cloneflags: flags,
		Credential: &syscall.Credential{Uid: nsRootID, Gid: nsRootID, Groups: []uint32{}},
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if flags&unix.CLONE_NEWUSER != 0 {
		m := []syscall.SysProcIDMap{
			{ContainerID: nsRootID, HostID: hostRootID, Size: 1},
			{ContainerID: nsGuestID, HostID: hostGuest, Size: 1},
		}
		attr.UidMappings = m
		attr.GidMappings = slices.Clone(m)
		attr.GidMappingsEnableSetgroups = true
	}
	return attr
}

// probeReport is what a started child sees of itself.
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

// probe (probeRole) writes what it sees of itself to its stdout.
func probe() {
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

func normalizeMap(m string) string { return strings.Join(strings.Fields(m), " ") }

func fdIdentity(fd int) string {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

func fdIdentityOf(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// probeCmd is an init-stage-like command that runs probe, its stdout and
// two extra fds files of the test's.
func probeCmd(t *testing.T, flags uintptr) (cmd *exec.Cmd, out *os.File, extra [2]*os.File) {
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
	cmd = &exec.Cmd{Path: exe, Args: []string{exe, probeRole}, Env: []string{"GOTRACEBACK=all"}, Dir: "/",
		Stdin: devNull, Stdout: out, Stderr: os.Stderr, ExtraFiles: extra[:], SysProcAttr: testAttr(flags)}
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

func dumpable(t *testing.T) bool {
	t.Helper()
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d == 1
}

// newFds lists the fds open now that were not before (fdTargets): what a
// start left open.
func newFds(t *testing.T, before map[string]string) []string {
	t.Helper()
	var opened []string
	for fd, target := range proctest.FDTargets(t) {
		if before[fd] != target {
			opened = append(opened, fd+" "+target)
		}
	}
	return opened
}
