package spawn

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

// TestSpawnNamespaceOwner: a new user namespace is owned by the host id
// its root maps to, through each start, and the supervisor's threads keep
// their uids, capabilities and dumpability.
func TestSpawnNamespaceOwner(t *testing.T) {
	testenv.RequireRoot(t)
	before := threadIDs(t)
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS)
	for _, s := range starts {
		t.Run(s.name, func(t *testing.T) {
			if s.name == "shared" && !canStartShared {
				t.Skip("this build starts through Go only")
			}
			cmd, _, _ := probeCmd(t, flags)
			// It waits on its stdin, a pipe closed when the test is done.
			cmd.Args = []string{"/bin/cat"}
			cmd.Path = "/bin/cat"
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			cmd.Stdin = r
			proc, err := s.start(cmd)
			if err != nil {
				t.Fatal(err)
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
			if uid != hostRootID {
				t.Errorf("user namespace owned by uid %d, want its root's %d", uid, hostRootID)
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
