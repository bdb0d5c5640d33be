package jail

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/testenv"
)

// unifiedCgroup is a job cgroup of the host's cgroup2 hierarchy: a hybrid
// host's, which has no controllers, does as well as a unified host's for
// what the jail does with one (start the child in it, kill it).
type unifiedCgroup struct {
	dir string
	fd  int
}

// newUnifiedCgroup makes a cgroup under the test's own on the cgroup2
// hierarchy, removed when the test ends. It skips where there is none.
// Like a job's, it serves one run: a child cloned into a cgroup that has
// been killed is killed at birth on this kernel.
func newUnifiedCgroup(t *testing.T) *unifiedCgroup {
	t.Helper()
	mnt, own := cgroup2Mount(t), ownUnifiedPath(t)
	name := fmt.Sprintf("pmjail-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	dir := filepath.Join(mnt, own, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("make a cgroup2 cgroup: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() {
		unix.Close(fd)
		// An emptied cgroup can be busy for a moment while its last task
		// is released.
		for i := 0; ; i++ {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			if i == 100 {
				t.Errorf("remove %s: %v", dir, err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return &unifiedCgroup{dir: dir, fd: fd}
}

func (u *unifiedCgroup) TaskFiles() ([]*os.File, error) {
	return nil, errors.New("cgroup v2: no task files")
}
func (u *unifiedCgroup) AddProc(pid int) error {
	return os.WriteFile(filepath.Join(u.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}
func (u *unifiedCgroup) FD() (int, bool) { return u.fd, true }
func (u *unifiedCgroup) CPUTime() (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join(u.dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond, err
		}
	}
	return 0, errors.New("cpu.stat has no usage_usec")
}
func (u *unifiedCgroup) Kill() error {
	return os.WriteFile(filepath.Join(u.dir, "cgroup.kill"), []byte("1"), 0)
}
func (u *unifiedCgroup) SetLimits(*specs.LinuxResources) error { return nil }
func (u *unifiedCgroup) Stats() (cgroup.Usage, error)          { return cgroup.Usage{}, nil }

// Delete leaves the removal to the test's cleanup.
func (u *unifiedCgroup) Delete() error { return nil }

// bornIn is a Cgroups whose every run is born in one cgroup2 cgroup.
type bornIn struct{ cg *unifiedCgroup }

func (b bornIn) Make(string, *specs.LinuxResources) (Cgroup, error) { return b.cg, nil }
func (bornIn) Reserve(string) (Cgroup, error)                       { return nil, errors.New("bornIn: no reserve") }
func (bornIn) AtBirth() bool                                        { return true }

// cgroup2Mount is where the host mounts its cgroup2 hierarchy.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, field := range fields {
			if field == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" {
				return fields[4]
			}
		}
	}
	testenv.SkipOrFail(t, "this host mounts no cgroup2 hierarchy (cgroup v1 only)")
	return ""
}

// ownUnifiedPath is this process's cgroup on the cgroup2 hierarchy.
func ownUnifiedPath(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	testenv.SkipOrFail(t, "this process has no cgroup2 cgroup")
	return ""
}

// TestPoolUnusedOnCgroupV2: a run whose cgroup is a cgroup2 one starts its
// child in it (CLONE_INTO_CGROUP), so it takes no pooled child, which was
// started outside, and starts none for later runs. The cgroup2 hierarchy of
// this hybrid host stands in for a unified host's.
func TestPoolUnusedOnCgroupV2(t *testing.T) {
	testenv.RequireRoot(t)
	script := `echo v2; ` + outlastReadBack

	t.Run("takes none", func(t *testing.T) {
		cg := newUnifiedCgroup(t)
		p := filledPool(t, 1)
		pooled := idlePids(p)[0]
		job := shellJob(t, script, testLimits)
		job.Cgroups, job.Pool = bornIn{cg}, p
		out := Run(context.Background(), job)
		if out.Status != StatusOK || string(out.Stdout) != "v2\n" || out.Pooled {
			t.Fatalf("status %s stdout %q pooled %v message %q", out.Status, out.Stdout, out.Pooled, out.Message)
		}
		if ids := idlePids(p); len(ids) != 1 || ids[0] != pooled {
			t.Errorf("the pool holds %v after a v2 run, want the child it held (%d)", ids, pooled)
		}
		want := "0::" + strings.TrimPrefix(cg.dir, cgroup2Mount(t))
		if o := out.Observed; o == nil || o.Error != "" {
			t.Errorf("the run's process was not read back: %+v", o)
		} else if !slices.Contains(o.Cgroups, want) {
			t.Errorf("the run's process was in %q, want %q among them", o.Cgroups, want)
		}
	})

	t.Run("fills none", func(t *testing.T) {
		cg := newUnifiedCgroup(t)
		p := NewPool(1, PoolOptions{})
		t.Cleanup(p.Close)
		job := shellJob(t, script, testLimits)
		job.Cgroups, job.Pool = bornIn{cg}, p
		if out := Run(context.Background(), job); out.Status != StatusOK || out.Pooled {
			t.Fatalf("status %s pooled %v message %q", out.Status, out.Pooled, out.Message)
		}
		// A refill starts before Run returns; wait for any to end.
		p.fills.Wait()
		if n := p.Idle(); n != 0 {
			t.Errorf("a v2 run left %d children started in the pool, want none", n)
		}
	})
}
