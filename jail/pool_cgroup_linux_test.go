package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/proctest"
	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/jail/initstage"
)

// cgroupManager returns a real cgroup manager, skipping (or failing under
// CI=true) where the host has none usable.
func cgroupManager(t *testing.T) *cgroup.Manager {
	t.Helper()
	testenv.RequireRoot(t)
	m, err := cgroup.NewManager()
	if errors.Is(err, cgroup.ErrNotSupported) {
		testenv.SkipOrFail(t, "no usable cgroups: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testCgroups is a Cgroups of real cgroups that remembers those it
// reserved, and refuses their limits once refuse is set.
type testCgroups struct {
	t      *testing.T
	m      *cgroup.Manager
	mu     sync.Mutex
	made   []*cgroup.Group
	seq    atomic.Int64
	refuse atomic.Pointer[error]
}

// reservedCgroup is a cgroup the pool's child waits with.
type reservedCgroup struct {
	*cgroup.Group
	h *testCgroups
}

func (r reservedCgroup) SetLimits(res *specs.LinuxResources) error {
	if err := r.h.refuse.Load(); err != nil {
		return *err
	}
	return r.Group.SetLimits(res)
}

func (h *testCgroups) Make(id string, res *specs.LinuxResources) (Cgroup, error) {
	j, err := h.m.Create(fmt.Sprintf("jailtest-run-%d-%d", time.Now().UnixNano()%1e9, h.seq.Add(1)), res)
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(func() { _ = j.Delete() })
	return j, nil
}

func (h *testCgroups) Reserve(id string) (Cgroup, error) {
	j, err := h.m.Reserve(fmt.Sprintf("jailtest-%d-%d", time.Now().UnixNano()%1e9, h.seq.Add(1)))
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.made = append(h.made, j)
	h.mu.Unlock()
	return reservedCgroup{j, h}, nil
}

func (h *testCgroups) AtBirth() bool { return h.m.Host().Mode == cgroup.V2 }

// cgroupJob is a shell job with a real cgroup, made by its run or adopted
// from the pool's, with pids limited to 16.
func cgroupJob(t *testing.T, h *testCgroups, script string) *Job {
	t.Helper()
	job := shellJob(t, script, testLimits)
	pids := int64(16)
	job.Spec.Linux.Resources = &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &pids}}
	job.Cgroups = h
	return job
}

// runReleased runs job and releases its cgroup when the test ends.
func runReleased(t *testing.T, job *Job) *Outcome {
	out := Run(context.Background(), job)
	t.Cleanup(func() {
		if err := out.Release(); err != nil {
			t.Errorf("release the run's cgroup: %v", err)
		}
	})
	return out
}

// adopted is the reserved cgroup the run adopted, nil if it made its own.
func adopted(out *Outcome) *cgroup.Group {
	if r, ok := out.Cgroup.(reservedCgroup); ok {
		return r.Group
	}
	return nil
}

// inCgroup reports whether pid's /proc/<pid>/cgroup places it in one of
// j's directories.
func inCgroup(t *testing.T, pid int, j *cgroup.Group) bool {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), "/"+j.Name()+"\n")
}

// heldCgroupPool returns a pool of one child whose children wait with
// real cgroups, filled after a first run that took none (it made its own
// cgroup and adopted nothing); the pool is closed when the test ends.
func heldCgroupPool(t *testing.T) (*cgroup.Manager, *testCgroups, *Pool) {
	t.Helper()
	m := cgroupManager(t)
	h := &testCgroups{t: t, m: m}
	p := NewPool(1, PoolOptions{Cgroups: h})
	t.Cleanup(p.Close)
	first := cgroupJob(t, h, `echo one`)
	first.Pool = p
	if out := runReleased(t, first); out.Status != StatusOK || out.Pooled || out.Cgroup == nil || adopted(out) != nil {
		t.Fatalf("first run: status %s pooled %v cgroup %v message %q", out.Status, out.Pooled, out.Cgroup, out.Message)
	}
	waitIdle(t, p, 1)
	return m, h, p
}

// TestPoolChildWaitsWithItsCgroup: with PoolOptions.Cgroups each pooled
// child holds a cgroup made ahead (on cgroup v2 it is born in it); a run
// that takes the child adopts that cgroup and gives it its limits, and its
// process runs there under them. Cgroups the pool still holds go with
// Close.
func TestPoolChildWaitsWithItsCgroup(t *testing.T) {
	m, h, p := heldCgroupPool(t)
	waiting := firstIdle(p)
	r, ok := waiting.cgroup.(reservedCgroup)
	if !ok || !cgroup.Reserved(r.Name()) {
		t.Fatalf("the pooled child holds %v, want a reserved cgroup", waiting.cgroup)
	}
	held := r.Group
	if v2 := m.Host().Mode == cgroup.V2; inCgroup(t, waiting.proc.Pid, held) != v2 {
		t.Errorf("cgroup v2 %v: the waiting child in its cgroup: %v (born in it on v2 only)", v2, !v2)
	}

	second := cgroupJob(t, h, `echo two; `+outlastReadBack)
	second.Pool = p
	out := runReleased(t, second)
	if out.Status != StatusOK || !strings.HasPrefix(string(out.Stdout), "two\n") || !out.Pooled {
		t.Fatalf("second run: status %s stdout %q pooled %v message %q", out.Status, out.Stdout, out.Pooled, out.Message)
	}
	if got := adopted(out); got != held {
		t.Fatalf("the run adopted %v, want the pooled child's cgroup %s", got, held.Name())
	}
	o := out.Observed
	if o == nil || o.Error != "" {
		t.Fatalf("the run's process was not read back: %+v", o)
	}
	for ctl, dir := range held.Paths() {
		// "id:controllers:path", the controllers empty on v2.
		in := slices.ContainsFunc(o.Cgroups, func(line string) bool {
			parts := strings.SplitN(line, ":", 3)
			return len(parts) == 3 && strings.HasSuffix(parts[2], "/"+held.Name()) &&
				(ctl == cgroup.UnifiedKey && parts[1] == "" || slices.Contains(strings.Split(parts[1], ","), ctl))
		})
		if !in {
			t.Errorf("the run's process (cgroups %q) is not in the adopted %s cgroup %s", o.Cgroups, ctl, dir)
		}
	}
	limit := held.Paths()[cgroup.Pids]
	if limit == "" {
		limit = held.Paths()[cgroup.UnifiedKey]
	}
	if m.Host().Has(cgroup.Pids) {
		// The job's 16 and pid 1's share, which the jail added: its one
		// thread on cgroup v1, on v2 all the init stage's tasks, counted
		// as the runtime started.
		want := strconv.FormatUint(16+out.InitTasks, 10)
		if v2 := m.Host().Mode == cgroup.V2; out.InitTasks == 0 || !v2 && out.InitTasks != initThread {
			t.Errorf("cgroup v2 %v: pid 1's share of the tasks is %d, want %d on v1 and its count on v2", v2, out.InitTasks, initThread)
		}
		data, err := os.ReadFile(filepath.Join(limit, "pids.max"))
		if err != nil || strings.TrimSpace(string(data)) != want {
			t.Errorf("the adopted cgroup's pids.max = %q (%v), want the job's 16 and pid 1's %d", data, err, out.InitTasks)
		}
	}

	// Close removes the cgroup of the child that still waits.
	waitIdle(t, p, 1)
	p.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, j := range h.made {
		if j == held {
			continue
		}
		for _, dir := range j.Paths() {
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the pool's cgroup %s outlived Close (%v)", dir, err)
			}
		}
	}
}

// TestPoolCgroupsServeOnlyRunsWithOne: a child waiting with a cgroup
// serves only a run that adopts it; a run without a cgroup starts its own.
// A run whose adoption fails ends at stage "cgroup" before its program,
// leaving no child.
func TestPoolCgroupsServeOnlyRunsWithOne(t *testing.T) {
	_, h, p := heldCgroupPool(t)
	pooled := idlePids(p)[0]

	plain := shellJob(t, `echo plain`, testLimits)
	plain.Pool = p
	if out := Run(context.Background(), plain); out.Status != StatusOK || out.Pooled {
		t.Fatalf("a run without a cgroup: status %s pooled %v message %q", out.Status, out.Pooled, out.Message)
	}
	if ids := idlePids(p); len(ids) != 1 || ids[0] != pooled {
		t.Errorf("the pool holds %v after a run without a cgroup, want its child %d", ids, pooled)
	}

	failing := cgroupJob(t, h, `echo started`)
	failing.Pool = p
	refused := errors.New("no limits for you")
	h.refuse.Store(&refused)
	before := proctest.Children(t)
	out := runReleased(t, failing)
	if out.Status != StatusInternalError || out.InitStage != initstage.StageCgroup || !out.Pooled || !errors.Is(out.CgroupErr, refused) || adopted(out) == nil || !strings.Contains(out.Message, "no limits for you") || strings.Contains(string(out.Stdout), "started") {
		t.Fatalf("status %s stage %q pooled %v cgroup error %v message %q stdout %q", out.Status, out.InitStage, out.Pooled, out.CgroupErr, out.Message, out.Stdout)
	}
	if !gone(pooled) {
		t.Errorf("the child whose cgroup was not adopted (pid %d) outlived its run", pooled)
	}
	// Besides what the pool refilled, nothing of the run is left.
	p.fills.Wait()
	refilled := idlePids(p)
	for _, pid := range proctest.Children(t) {
		if !slices.Contains(before, pid) && !slices.Contains(refilled, atoi(t, pid)) {
			t.Errorf("child %s left behind", pid)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRunAccountsAndReleasesItsCgroup: the jail makes the job's cgroup
// through Job.Cgroups, reads its usage back into the outcome once the run
// is over, and leaves it in place until Release removes it.
func TestRunAccountsAndReleasesItsCgroup(t *testing.T) {
	m := cgroupManager(t)
	h := &testCgroups{t: t, m: m}
	job := cgroupJob(t, h, `i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo done`)
	out := Run(context.Background(), job)
	t.Cleanup(func() { _ = out.Release() })
	if out.Status != StatusOK || out.CgroupErr != nil || out.UsageErr != nil {
		t.Fatalf("status %s message %q cgroup error %v usage error %v", out.Status, out.Message, out.CgroupErr, out.UsageErr)
	}
	cg, ok := out.Cgroup.(*cgroup.Group)
	if !ok {
		t.Fatalf("the outcome holds %v, want the job's cgroup", out.Cgroup)
	}
	if m.Host().Has(cgroup.CPU) && out.Usage.CPUTime <= 0 {
		t.Errorf("the cgroup's usage %+v has no CPU time of the run's loop", out.Usage)
	}
	paths := cg.Paths()
	for _, dir := range paths {
		if _, err := os.Lstat(dir); err != nil {
			t.Errorf("the job's cgroup %s is gone before Release: %v", dir, err)
		}
	}
	if err := out.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if out.Cgroup != nil {
		t.Error("the outcome still holds its cgroup after Release")
	}
	for _, dir := range paths {
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the job's cgroup %s outlived Release (%v)", dir, err)
		}
	}
}
