package cgroup

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
)

// ownPaths reads /proc/self/cgroup independently of the package.
func ownPaths(t *testing.T) (v1 map[string]string, unified string) {
	t.Helper()
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v1 = map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	return v1, unified
}

func TestProbeV1(t *testing.T) {
	m := requireMode(t, V1)
	h := m.Host()
	if h.Mode != V1 {
		t.Fatalf("mode %v, want v1", h.Mode)
	}
	for _, c := range []string{Memory, Pids, CPU, CPUAcct} {
		if !h.Has(c) {
			testenv.SkipOrFail(t, "v1 controller %s not usable: %s", c, h.Reason)
		}
	}
	own, _ := ownPaths(t)
	for _, c := range h.Controllers {
		// This host mounts each v1 controller at its root, so the parent
		// is the mount plus our path.
		want := filepath.Join("/sys/fs/cgroup", c, own[c])
		if h.Parent[c] != want {
			t.Errorf("parent of %s: %s, want %s", c, h.Parent[c], want)
		}
	}
	if left := leftovers(t, m); len(left) != 0 {
		t.Errorf("probe left %v", left)
	}
}

func TestProbeMatchesMountedMode(t *testing.T) {
	h, err := Probe()
	var st syscall.Statfs_t
	if serr := syscall.Statfs("/sys/fs/cgroup", &st); serr != nil {
		if h.Mode != Unavailable || err == nil {
			t.Fatalf("no /sys/fs/cgroup but mode %v, err %v", h.Mode, err)
		}
		return
	}
	const cgroup2Magic = 0x63677270
	switch {
	case err != nil:
		testenv.SkipOrFail(t, "cgroups unusable: %v", err)
	case st.Type == cgroup2Magic && h.Mode != V2:
		t.Errorf("cgroup2 at /sys/fs/cgroup but mode %v", h.Mode)
	case st.Type != cgroup2Magic && h.Mode != V1:
		t.Errorf("no cgroup2 at /sys/fs/cgroup but mode %v", h.Mode)
	}
	if h.Mode.String() == "" || len(h.Parent) == 0 {
		t.Errorf("host %+v", h)
	}
}

func TestV2ControllersEnabledForJobs(t *testing.T) {
	m := requireMode(t, V2)
	h := m.Host()
	parent := h.Parent[UnifiedKey]
	on, err := controllerList(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{Memory, Pids} {
		if !h.Has(c) {
			testenv.SkipOrFail(t, "v2 controller %s not delegated: %s", c, h.Reason)
		}
		if !on[c] {
			t.Errorf("%s not enabled in %s/cgroup.subtree_control", c, parent)
		}
	}
	// We no longer sit in the cgroup that distributes to jobs, unless
	// it is the root (exempt from the no internal process rule).
	_, unified := ownPaths(t)
	if self := filepath.Join("/sys/fs/cgroup", unified); self == parent && parent != "/sys/fs/cgroup" {
		t.Errorf("supervisor still inside %s, which has controllers enabled", parent)
	}
}

func TestV2CloneIntoCgroup(t *testing.T) {
	m := requireMode(t, V2)
	j := create(t, m, nil)
	fd, ok := j.FD()
	if !ok {
		t.Fatal("v2 job has no FD")
	}
	cmd := exec.Command("/bin/cat", "/proc/self/cgroup")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("CLONE_INTO_CGROUP: %v", err)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "/"+j.Name()) {
		t.Errorf("child's cgroup %q, want .../%s", out, j.Name())
	}
}

func TestV1JobHasNoFD(t *testing.T) {
	m := requireMode(t, V1)
	j := create(t, m, nil)
	if _, ok := j.FD(); ok {
		t.Error("v1 job claims an FD")
	}
}

// containerd's cgroup1 opens a controller at <root>/<name>: a v1 mount is
// usable only where that path leads to it, itself or through a link (as
// cpu -> cpu,cpuacct does). Paths only: no cgroup file system is touched.
func TestProbeV1NeedsTheControllersPath(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{Memory, "cpu,cpuacct", "pids-elsewhere", Freezer} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{CPU: "cpu,cpuacct", CPUAcct: "cpu,cpuacct", Pids: Freezer} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	mounts := []mount{
		{Root: "/", Point: filepath.Join(root, Memory), FSType: "cgroup", Super: []string{"rw", Memory}},
		{Root: "/", Point: filepath.Join(root, "cpu,cpuacct"), FSType: "cgroup", Super: []string{"rw", CPU, CPUAcct}},
		// pids is mounted where <root>/pids does not lead (it leads to freezer's).
		{Root: "/", Point: filepath.Join(root, "pids-elsewhere"), FSType: "cgroup", Super: []string{"rw", Pids}},
		{Root: "/", Point: filepath.Join(root, Freezer), FSType: "cgroup", Super: []string{"rw", Freezer}},
	}
	own := map[string]string{Memory: "/", CPU: "/", CPUAcct: "/", Pids: "/", Freezer: "/"}
	h := probeV1(mounts, own, false)
	want := []string{Memory, CPU, CPUAcct, Freezer}
	if strings.Join(h.Controllers, ",") != strings.Join(want, ",") {
		t.Fatalf("controllers %v (reason %q); want %v", h.Controllers, h.Reason, want)
	}
	if h.Reason != "pids: mounted at "+filepath.Join(root, "pids-elsewhere")+" without a "+root+"/pids link" {
		t.Fatalf("reason %q; want only pids' missing link", h.Reason)
	}
}

// Every v1 hierarchy's root has the same inode number (1): only the device
// tells two apart.
func TestSameFileComparesDevices(t *testing.T) {
	var proc, sys syscall.Stat_t
	if err := syscall.Stat("/proc", &proc); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat("/sys", &sys); err != nil {
		t.Fatal(err)
	}
	if proc.Ino != sys.Ino || proc.Dev == sys.Dev {
		t.Fatalf("/proc (dev %d, ino %d) and /sys (dev %d, ino %d): want two file systems' roots with one inode number", proc.Dev, proc.Ino, sys.Dev, sys.Ino)
	}
	if sameFile("/proc", "/sys") {
		t.Fatal("sameFile(/proc, /sys) = true: two file systems' roots with one inode number")
	}
	if !sameFile("/proc", "/proc/self/..") {
		t.Fatal("sameFile(/proc, /proc/self/..) = false")
	}
}
