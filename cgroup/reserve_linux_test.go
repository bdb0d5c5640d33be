package cgroup

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// limitFiles are the files that hold pmjail's limits, per mode, with what
// they say when nothing is set.
func limitFiles(m *Manager) map[string][2]string {
	if m.Host().Mode == V2 {
		return map[string][2]string{
			Memory: {"memory.max", "max"},
			Pids:   {"pids.max", "max"},
			CPU:    {"cpu.max", "max 100000"},
		}
	}
	return map[string][2]string{
		// v1's "unlimited": the largest int64 rounded down to a page.
		Memory: {"memory.limit_in_bytes", strconv.FormatInt(math.MaxInt64/int64(os.Getpagesize())*int64(os.Getpagesize()), 10)},
		Pids:   {"pids.max", "max"},
		CPU:    {"cpu.cfs_quota_us", "-1"},
	}
}

func limitFile(t *testing.T, j *Group, ctl, file string) string {
	t.Helper()
	dir, ok := j.paths[ctl]
	if !ok {
		dir = j.paths[UnifiedKey]
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// TestReserveThenSetLimits: a reserved cgroup (a pooled init stage's) is
// made in every controller the host has, with no limit, and named as one
// that Sweep knows; SetLimits then gives it a job's limits, which bind the
// tasks already in it.
func TestReserveThenSetLimits(t *testing.T) {
	m := requireManager(t)
	j, err := m.Reserve("t" + itoa(int(time.Now().UnixNano()%1e6)))
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	t.Cleanup(func() {
		if err := j.Delete(); err != nil {
			t.Errorf("cleanup Delete: %v", err)
		}
	})
	if o, ok := ownerOf(j.Name()); !ok || o != self() || o.pid != os.Getpid() || !Reserved(j.Name()) {
		t.Errorf("reserved cgroup %q: owner %+v %v, Reserved %v", j.Name(), o, ok, Reserved(j.Name()))
	}
	files := limitFiles(m)
	for _, c := range []string{Memory, Pids, CPU} {
		if !m.Host().Has(c) {
			continue
		}
		if got := limitFile(t, j, c, files[c][0]); got != files[c][1] {
			t.Errorf("reserved cgroup's %s = %q, want no limit (%q)", files[c][0], got, files[c][1])
		}
	}

	if err := j.SetLimits(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(-1)}}); err == nil || !strings.Contains(err.Error(), j.Name()) {
		t.Errorf("SetLimits with a negative memory limit: %v, want an error naming the cgroup", err)
	}
	// A task in the cgroup before its limits, which forks only after them.
	gate := filepath.Join(t.TempDir(), "go")
	c := start(t, j, "while [ ! -e "+gate+" ]; do sleep 0.01; done; i=0; while [ $i -lt 20 ]; do sleep 30 & i=$((i+1)); done; sleep 30")
	res := &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(8)}, CPU: cpuIfAny(m)}
	if m.Host().Has(Memory) {
		res.Memory = &specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(64 << 20)}
	}
	if err := j.SetLimits(res); err != nil {
		t.Fatalf("SetLimits: %v", err)
	}
	want := map[string]string{Memory: "67108864", Pids: "8", CPU: "50000"}
	if m.Host().Mode == V2 {
		want[CPU] = "50000 100000"
	}
	for _, ctl := range []string{Memory, Pids, CPU} {
		if !m.Host().Has(ctl) {
			continue
		}
		if got := limitFile(t, j, ctl, files[ctl][0]); got != want[ctl] {
			t.Errorf("%s = %q after SetLimits, want %q", files[ctl][0], got, want[ctl])
		}
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		u, err := j.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if u.PidsLimitHit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("forks past the limit set on a reserved cgroup were not refused: %+v", u)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cur := pidsCurrent(t, j); cur > 8 {
		t.Errorf("%d tasks under a limit of 8", cur)
	}
	if err := j.Delete(); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 5*time.Second)
	assertGone(t, j)
}
