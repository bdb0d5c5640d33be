package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/internal/dirwatch"
	"github.com/pmjail/pmjail/internal/testenv"
)

// watchCreates records the directories this process's cgroup names
// (pmjail-<pid>-...) that appear in dirs while fn runs: vfs reports every
// mkdir to inotify, cgroupfs included.
func watchCreates(t *testing.T, dirs []string, fn func()) []string {
	t.Helper()
	w, err := dirwatch.New(dirs)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fn()
	made, err := w.Created(fmt.Sprintf("%s%d-", namePrefix, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	return made
}

func parents(h *Host) []string {
	var out []string
	for _, d := range h.Parent {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// TestLazyManagerWritesNothing: NewLazyManager reads the layout NewManager
// proves, and makes no cgroup to do so.
func TestLazyManagerWritesNothing(t *testing.T) {
	m := requireManager(t)
	var lazy *Manager
	made := watchCreates(t, parents(m.Host()), func() {
		var err error
		if lazy, err = NewLazyManager(); err != nil {
			t.Fatalf("NewLazyManager: %v", err)
		}
	})
	if len(made) != 0 {
		t.Errorf("NewLazyManager made cgroups: %v", made)
	}
	if m.Host().Mode == V2 && lazy.lazy == false {
		testenv.SkipOrFail(t, "v2 controllers were not enabled for our children: NewLazyManager is NewManager here")
	}
	if !lazy.lazy {
		t.Fatal("NewLazyManager returned a proven manager")
	}
	// The probe does make them: the watch would have seen it.
	if made := watchCreates(t, parents(m.Host()), func() { _, _ = NewManager() }); len(made) == 0 {
		t.Fatal("the watch saw no probe cgroup from NewManager: it proves nothing")
	}
	h, lh := m.Host(), lazy.Host()
	if lh.Mode != h.Mode {
		t.Errorf("mode %v, the probe's %v", lh.Mode, h.Mode)
	}
	for _, c := range h.Controllers {
		if c == Freezer && h.Mode == V2 {
			continue // learnt per job from cgroup.freeze
		}
		if !lh.Has(c) {
			t.Errorf("lazy layout lacks %s, which the probe proved", c)
		}
	}
	for k, d := range h.Parent {
		if lh.Parent[k] != d {
			t.Errorf("parent %q: %s, the probe's %s", k, lh.Parent[k], d)
		}
	}
	if p, err := lazy.Probed(); err != nil || p.lazy || p == lazy {
		t.Errorf("Probed of a lazy manager: %v, %v: want a new proven manager", p, err)
	}
	if p, err := m.Probed(); err != nil || p != m {
		t.Errorf("Probed of a proven manager: %v, %v: want itself", p, err)
	}
}

// TestLazyJobLearnsWhatTheProbeWould: a lazy manager's job learns swap
// accounting, cgroup.kill and the freezer from its own directories, as the
// probe's throwaway child shows them, and its limits are the same.
func TestLazyJobLearnsWhatTheProbeWould(t *testing.T) {
	m := requireManager(t)
	lazy, err := NewLazyManager()
	if err != nil {
		t.Fatal(err)
	}
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(96 << 20), Swap: i64(96 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(24)},
		CPU:    cpuIfAny(m),
	}
	j := create(t, lazy, res)
	h := m.Host()
	if j.swapCapped != h.SwapCapped || j.kill != h.Kill || j.freezer != h.Has(Freezer) {
		t.Errorf("lazy job: swap %v kill %v freezer %v; the probe: swap %v kill %v freezer %v",
			j.swapCapped, j.kill, j.freezer, h.SwapCapped, h.Kill, h.Has(Freezer))
	}
	if h.Mode == V1 && h.SwapCapped {
		if got := strings.TrimSpace(readOrFail(t, filepath.Join(j.Paths()[Memory], swapFileV1))); got != itoa(96<<20) {
			t.Errorf("%s = %s, want %d (no swap)", swapFileV1, got, 96<<20)
		}
	}
	if h.Mode == V2 && h.SwapCapped {
		if got := strings.TrimSpace(readOrFail(t, filepath.Join(j.Paths()[UnifiedKey], swapFileV2))); got != "0" {
			t.Errorf("%s = %s, want 0", swapFileV2, got)
		}
	}
	c := start(t, j, "sleep 300")
	if err := j.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := c.wait(t, 5*time.Second); err == nil {
		t.Error("task survived Delete")
	}
	assertGone(t, j)
}

func readOrFail(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLazyCreateRefusedIsNotSupported: for a lazy manager a hierarchy that
// refuses the job's cgroup is one the probe would have left out: Create
// says so (ErrNotSupported) and leaves nothing in the others.
func TestLazyCreateRefusedIsNotSupported(t *testing.T) {
	m := requireManager(t)
	lazy, err := NewLazyManager()
	if err != nil {
		t.Fatal(err)
	}
	h := *lazy.Host()
	h.Parent = map[string]string{}
	for k, v := range lazy.Host().Parent {
		h.Parent[k] = v
	}
	// The last hierarchy Create makes refuses: a parent that is not there.
	last := h.Controllers[len(h.Controllers)-1]
	if h.Mode == V2 {
		last = UnifiedKey
	}
	h.Parent[last] = filepath.Join(h.Parent[last], "pmjail-test-no-such-parent")
	broken := &Manager{host: &h, own: self(), lazy: true}
	_, err = broken.Create("refused", &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(8)}})
	if !errors.Is(err, ErrNotSupported) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Create in a refusing hierarchy: %v, want ErrNotSupported wrapping the mkdir error", err)
	}
	if left := leftovers(t, m); len(left) != 0 {
		t.Errorf("a refused Create left %v", left)
	}
	// A proven manager's hierarchies were proven: the same failure is an
	// error, not a missing controller.
	proven := &Manager{host: &h, own: self()}
	if _, err := proven.Create("refused", nil); err == nil || errors.Is(err, ErrNotSupported) {
		t.Errorf("proven manager: %v, want an error that is not ErrNotSupported", err)
	}
	if left := leftovers(t, m); len(left) != 0 {
		t.Errorf("a refused Create left %v", left)
	}
}
