package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/internal/testenv"
)

// A pmjail run as ftrace printed it (trimmed), with threads of the runtime
// and an unrelated process around it.
const sampleTrace = `# tracer: nop
#
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
          pmjail-100   [001] ..... 10.000500: sched_process_exec: filename=/opt/pm jail/bin/pmjail pid=100 old_pid=100
            deno-105   [001] ..... 10.004000: sched_process_exec: filename=/opt/pm jail/bin/pmjail-init pid=105 old_pid=105
     pmjail-init-106   [000] ..... 10.005000: sched_process_exit: comm=pmjail-init pid=106 prio=120 group_dead=false
            deno-105   [001] ..... 10.006500: sched_process_exec: filename=/runtime/deno pid=105 old_pid=107
            bash-900   [000] ..... 10.010000: sched_process_exec: filename=/runtime/deno pid=900 old_pid=900
 tokio-runtime-w-108   [000] ..... 10.025000: sched_process_exit: comm=tokio-runtime-w pid=108 prio=120 group_dead=false
            deno-105   [001] .N... 10.026000: sched_process_exit: comm=deno pid=105 prio=120 group_dead=false
          pmjail-100   [001] ..... 10.029000: sched_process_exit: comm=pmjail pid=100 prio=120 group_dead=true
`

func TestParseTrace(t *testing.T) {
	events, err := parseTrace(strings.NewReader(sampleTrace))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 8 {
		t.Fatalf("%d events, want 8: %+v", len(events), events)
	}
	first := events[0]
	if !first.exec || first.pid != 100 || first.file != "/opt/pm jail/bin/pmjail" || first.at != 10000500*time.Microsecond {
		t.Errorf("first event %+v", first)
	}
	if e := events[3]; !e.exec || e.pid != 105 || e.file != "/runtime/deno" {
		t.Errorf("an exec from another thread keeps the process's pid: %+v", e)
	}
	if e := events[2]; e.exec || e.pid != 106 {
		t.Errorf("exit event %+v", e)
	}
}

func TestParseTraceRefusesBrokenEvents(t *testing.T) {
	for _, line := range []string{
		"x-1 [000] ..... 1.0: sched_process_exec: pid=1 old_pid=1",
		"x-1 [000] ..... 1.0: sched_process_exec: filename=/bin/x old_pid=1",
		"x-1 [000] ..... 1.0: sched_process_exit: comm=x prio=120",
		"x-1 [000] ..... 1.0: sched_process_exit: comm=x pid=one prio=120",
		"x-1 [000] ..... soon: sched_process_exit: comm=x pid=1 prio=120",
	} {
		if events, err := parseTrace(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("%q: parsed as %+v", line, events)
		}
	}
}

func TestCut(t *testing.T) {
	events, err := parseTrace(strings.NewReader(sampleTrace))
	if err != nil {
		t.Fatal(err)
	}
	run := span{start: 10000 * time.Millisecond, end: 10030 * time.Millisecond}
	p, err := cut(events, run, "/runtime/deno", "/opt/pm jail/bin/pmjail-init")
	if err != nil {
		t.Fatal(err)
	}
	want := phases{toExec: 6500 * time.Microsecond, stage: 2500 * time.Microsecond, runtime: 19500 * time.Microsecond, after: 4 * time.Millisecond}
	if p != want {
		t.Errorf("cut = %+v, want %+v", p, want)
	}

	// The runtime's exec must fall within the run, and its own thread's
	// exit ends it, not another thread's or process's.
	if _, err := cut(events, span{start: 10007 * time.Millisecond, end: 10030 * time.Millisecond}, "/runtime/deno", ""); err == nil {
		t.Error("a run that starts after the exec it would take was cut")
	}
	if _, err := cut(events[:6], run, "/runtime/deno", ""); err == nil {
		t.Error("a run without the runtime's exit was cut")
	}
	if _, err := cut(events, run, "/runtime/deno", "/usr/bin/other-stage"); err == nil {
		t.Error("a run without its init stage's exec was cut")
	}
}

func TestMedianPhases(t *testing.T) {
	ms := time.Millisecond
	got := medianPhases([]phases{
		{toExec: 1 * ms, runtime: 30 * ms, after: 2 * ms},
		{toExec: 9 * ms, runtime: 10 * ms, after: 1 * ms},
		{toExec: 2 * ms, runtime: 20 * ms, after: 7 * ms},
	})
	if want := (phases{toExec: 2 * ms, runtime: 20 * ms, after: 2 * ms}); got != want {
		t.Errorf("medianPhases = %+v, want %+v (each column on its own)", got, want)
	}
}

// TestStaleInstancesRemoved leaves an instance as a killed bench would, with
// its events on, and checks that the next bench's tracer removes it and its
// own on close.
func TestStaleInstancesRemoved(t *testing.T) {
	testenv.RequireRoot(t) // tracefs
	mountsBefore := tracefsMounts(t)
	tracefs, err := tracefsDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if after := tracefsMounts(t); after != mountsBefore {
			t.Errorf("the host's tracefs mounts changed: %d before, %d after", mountsBefore, after)
		}
	})
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tracefs, "instances", fmt.Sprintf("%s%d", instancePrefix, dead.Process.Pid))
	if err := os.Mkdir(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(stale); err == nil {
			(&tracer{dir: stale}).close()
		}
	})
	if err := os.WriteFile(filepath.Join(stale, "events/sched/sched_process_exit/enable"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	tr, err := startTracer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a dead bench's instance is still there: %v", err)
	}
	tr.close()
	if _, err := os.Stat(tr.dir); !os.IsNotExist(err) {
		t.Errorf("the bench's own instance is still there after close: %v", err)
	}
}

// tracefsMounts counts the tracefs mounts the calling goroutine's thread
// sees: the bench's own, if it makes one, must not be among them. (Not
// /proc/self, the main thread's view: a thread locked to a goroutine that
// ends there is kept, with its mount namespace, when it is the main one.)
func tracefsMounts(t *testing.T) int {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), " - tracefs ")
}
