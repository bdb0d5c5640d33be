package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestNamespaceOwnedByLease: a job's user namespace is owned by the job's
// own host id, through either start, and the supervisor's threads keep
// their uids, capabilities and dumpability.
func TestNamespaceOwnedByLease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	lease, err := leaseIDs()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.release()
	before := threadIDs(t)
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS)
	for _, c := range []struct {
		name  string
		start func(*exec.Cmd) (*os.Process, error)
	}{
		{"shared", spawnShared},
		{"go", func(c *exec.Cmd) (*os.Process, error) { return c.Process, startLocked(c) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "shared" && !canSpawnShared {
				t.Skip("this build starts through Go only")
			}
			cmd := &exec.Cmd{Path: "/bin/sleep", Args: []string{"sleep", "60"}, Dir: "/",
				Stdin: os.Stdin, Stdout: os.Stderr, Stderr: os.Stderr, SysProcAttr: childAttr(flags, lease)}
			proc, err := c.start(cmd)
			if err != nil {
				t.Fatal(err)
			}
			if proc == nil {
				proc = cmd.Process
			}
			defer func() {
				_ = proc.Kill()
				_, _ = proc.Wait()
			}()
			f, err := os.Open("/proc/" + strconv.Itoa(proc.Pid) + "/ns/user")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var uid uint32
			if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.NS_GET_OWNER_UID, uintptr(unsafe.Pointer(&uid))); errno != 0 {
				t.Fatal(os.NewSyscallError("ioctl NS_GET_OWNER_UID", errno))
			}
			if int(uid) != lease.rootID() {
				t.Errorf("user namespace owned by uid %d, want the lease's %d", uid, lease.rootID())
			}
			if after := threadIDs(t); after != before {
				t.Errorf("the supervisor's threads changed:\nbefore %s\nafter  %s", before, after)
			}
			if d, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); d != dumpable {
				t.Errorf("dumpable %d, was %d", d, dumpable)
			}
		})
	}
}

// threadIDs is the set of distinct uid and capability lines of this
// process's threads.
func threadIDs(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob("/proc/self/task/*/status")
	seen := map[string]bool{}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "Uid:") || strings.HasPrefix(line, "Cap") {
				seen[line] = true
			}
		}
	}
	var lines []string
	for l := range seen {
		lines = append(lines, l)
	}
	slices.Sort(lines)
	return strings.Join(lines, "; ")
}
