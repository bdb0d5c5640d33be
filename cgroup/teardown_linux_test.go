package cgroup

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// traced records the cgroup files read and written while fn runs.
func traced(t *testing.T, fn func()) (reads, writes []string) {
	t.Helper()
	var mu sync.Mutex
	traceFile = func(op, path string) {
		mu.Lock()
		defer mu.Unlock()
		if op == "read" {
			reads = append(reads, path)
		} else {
			writes = append(writes, path)
		}
	}
	defer func() { traceFile = nil }()
	fn()
	return reads, writes
}

func named(paths []string, base string) []string {
	var out []string
	for _, p := range paths {
		if filepath.Base(p) == base {
			out = append(out, p)
		}
	}
	return out
}

// ended returns a job whose one task has come and gone, as every job is
// once the jail has reaped its pid 1.
func ended(t *testing.T, m *Manager) *Group {
	t.Helper()
	j := create(t, m, &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(64 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(16)},
		CPU:    cpuIfAny(m),
	})
	if err := start(t, j, "exit 0").wait(t, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestKillOfEndedJobReadsOneHierarchy: Kill after the job's tasks are gone
// confirms it in the hierarchy every task joins first, not in all of them.
func TestKillOfEndedJobReadsOneHierarchy(t *testing.T) {
	m := requireManager(t)
	j := ended(t, m)
	reads, writes := traced(t, func() {
		if err := j.Kill(); err != nil {
			t.Fatal(err)
		}
	})
	procs := named(reads, "cgroup.procs")
	lead := filepath.Join(j.paths[j.order[0]], "cgroup.procs")
	if len(procs) != 1 || procs[0] != lead || len(writes) != 0 {
		t.Errorf("Kill of an ended job read %v and wrote %v; want %s alone", reads, writes, lead)
	}
}

// TestDeleteOfEndedJobKillsNothing: Delete of an ended job only removes its
// directories (the removal proves it empty): no listing, no freezing.
func TestDeleteOfEndedJobKillsNothing(t *testing.T) {
	m := requireManager(t)
	j := ended(t, m)
	reads, writes := traced(t, func() {
		if err := j.Delete(); err != nil {
			t.Fatal(err)
		}
	})
	if len(reads) != 0 || len(writes) != 0 {
		t.Errorf("Delete of an ended job read %v and wrote %v; want neither", reads, writes)
	}
	assertGone(t, j)
}

// TestKillFindsTaskJoinedThroughTaskFiles: a task that joins the job as the
// init stage does, writing 0 to each task file in TaskFiles' order, is in
// the first hierarchy, so Kill's one read finds it, and Kill ends it.
func TestKillFindsTaskJoinedThroughTaskFiles(t *testing.T) {
	m := requireMode(t, V1)
	j := create(t, m, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(16)}})
	files, err := j.TaskFiles()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(j.paths[j.order[0]], "tasks"); files[0].Name() != want {
		t.Fatalf("first task file %s, want the first hierarchy's %s", files[0].Name(), want)
	}
	script := ""
	for i := range files {
		script += "echo 0 >&" + itoa(3+i) + "; "
	}
	cmd := exec.Command("/bin/sh", "-c", script+"exec 3>&- 4>&- 5>&- 6>&- 7>&-; sleep 300 & sleep 300")
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	closeFiles(files)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pids, err := readProcsFile(j.paths[j.order[len(j.order)-1]])
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell and its sleep did not join: %v", pids)
		}
	}
	if err := j.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Errorf("shell: want killed, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the shell survived Kill")
	}
	if pids, err := j.procs(); err != nil || len(pids) != 0 {
		t.Errorf("after Kill: %v, %v", pids, err)
	}
}

// TestStatsReadsWhatTheResultUses: Stats reads the files behind the fields
// a run's result reports, and where the kernel keeps pids.peak, not
// pids.current besides.
func TestStatsReadsWhatTheResultUses(t *testing.T) {
	m := requireManager(t)
	j := ended(t, m)
	var u Usage
	reads, _ := traced(t, func() {
		var err error
		if u, err = j.Stats(); err != nil {
			t.Fatal(err)
		}
	})
	var names []string
	for _, r := range reads {
		names = append(names, filepath.Base(r))
	}
	if u.CPUTime == 0 || j.pidsPeak == peakKept && u.PidsPeak == 0 {
		t.Errorf("usage %+v: want the task's CPU time and (where the kernel keeps it) its peak", u)
	}
	if j.pidsPeak == peakKept && slices.Contains(names, "pids.current") {
		t.Errorf("Stats read pids.current besides pids.peak: %v", names)
	}
	if !j.swapCapped && slices.Contains(names, "memory.memsw.failcnt") {
		t.Errorf("Stats read memsw without swap accounting: %v", names)
	}
	want := map[Mode][]string{
		V1: {"memory.max_usage_in_bytes", "memory.failcnt", "memory.oom_control", "cpuacct.usage", "pids.peak", "pids.events"},
		V2: {"memory.peak", "memory.events", "cpu.stat", "pids.peak", "pids.events"},
	}[m.Host().Mode]
	for _, w := range want {
		if !slices.Contains(names, w) && !(w == "pids.peak" && j.pidsPeak == peakNotKept) && !(w == "memory.peak" && j.memPeak == peakNotKept) {
			t.Errorf("Stats did not read %s: %v", w, names)
		}
	}
	if len(names) > len(want)+1 {
		t.Errorf("Stats read %d files, want at most %d: %v", len(names), len(want)+1, names)
	}
}

// TestCPUTimeReadsCPUTimeAlone: the jail's CPU-time poll reads one file
// where the kernel keeps the peaks; where it keeps none, the poll samples
// the current value for Stats' peak.
func TestCPUTimeReadsCPUTimeAlone(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(16)}})
	c := start(t, j, "sleep 1 & sleep 1 & i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; wait")
	if _, err := j.Stats(); err != nil { // learns which peaks the kernel keeps
		t.Fatal(err)
	}
	reads, _ := traced(t, func() {
		if _, err := j.CPUTime(); err != nil {
			t.Fatal(err)
		}
	})
	want := 1
	if j.pidsPeak == peakNotKept {
		want++
	}
	if j.memPeak == peakNotKept {
		want++
	}
	if len(reads) != want {
		t.Errorf("CPUTime read %v, want %d file(s)", reads, want)
	}
	// Where the kernel keeps no pids.peak, the polls keep it.
	j.mu.Lock()
	j.pidsPeak, j.pidsSeen = peakNotKept, 0
	j.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); j.pidsSeen < 3; time.Sleep(5 * time.Millisecond) {
		if _, err := j.CPUTime(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the polls never saw the three tasks: %d", j.pidsSeen)
		}
	}
	if err := c.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	u, err := j.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if u.PidsPeak < 3 {
		t.Errorf("peak %d after polls that saw 3 tasks", u.PidsPeak)
	}
}

// TestTasksPeakReadsPidsAlone: a warm run's task check reads the tasks'
// peak and nothing else, and gets what Stats reports.
func TestTasksPeakReadsPidsAlone(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(16)}})
	c := start(t, j, "sleep 1 & sleep 1 & wait")
	for deadline := time.Now().Add(5 * time.Second); pidsCurrent(t, j) < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the three tasks never ran: %d", pidsCurrent(t, j))
		}
	}
	var peak uint64
	reads, _ := traced(t, func() {
		var err error
		if peak, err = j.TasksPeak(); err != nil {
			t.Fatal(err)
		}
	})
	for _, r := range reads {
		if n := filepath.Base(r); n != "pids.peak" && n != "pids.current" {
			t.Errorf("TasksPeak read %s: %v", n, reads)
		}
	}
	if len(reads) == 0 || len(reads) > 2 {
		t.Errorf("TasksPeak read %v: want pids.peak or pids.current", reads)
	}
	if peak < 3 {
		t.Errorf("peak %d with three tasks running", peak)
	}
	if err := c.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	u, err := j.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if u.PidsPeak < peak {
		t.Errorf("Stats' peak %d below TasksPeak's %d", u.PidsPeak, peak)
	}
}

// TestTasksNowAndLimit: the start gate's two calls, the tasks held now and
// the bound on them set alone.
func TestTasksNowAndLimit(t *testing.T) {
	m := requireManager(t)
	j := create(t, m, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: i64(16)}})
	c := start(t, j, "sleep 1 & sleep 1 & wait")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		n, err := j.TasksNow()
		if err != nil {
			t.Fatal(err)
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the three tasks never ran: %d", n)
		}
	}
	if err := j.SetTasksLimit(5); err != nil {
		t.Fatal(err)
	}
	dir, ok := j.pidsDir()
	if !ok {
		t.Fatal("no pids directory")
	}
	if s, err := readString(filepath.Join(dir, "pids.max")); err != nil || strings.TrimSpace(s) != "5" {
		t.Errorf("pids.max %q (%v) after SetTasksLimit(5)", s, err)
	}
	if err := j.SetTasksLimit(0); err == nil {
		t.Error("a bound of no task was set")
	}
	if err := c.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
