package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/runtimes"
)

// The phases section splits each run at the moments the kernel records: the
// runtime's exec and the exit of the thread that exec'd it. What comes before
// the exec is the wrapper's start and set-up (for pmjail, the supervisor and
// its init stage), what comes after is the runtime's teardown, the wrapper's
// own and its result.

// hostTracefs is where the host mounts tracefs, if it does.
const hostTracefs = "/sys/kernel/tracing"

// tracefsDir returns a path to tracefs: the host's mount when it has one,
// else a mount of the bench's own, made on a thread in a mount namespace
// of its own and reached through an open descriptor (/proc/self/fd/N), so
// nothing is mounted on the host and nothing is left after a kill. Every
// tracefs mount shows the same instances.
var tracefsDir = sync.OnceValues(func() (string, error) {
	if _, err := os.Stat(filepath.Join(hostTracefs, "instances")); err == nil {
		return hostTracefs, nil
	}
	type opened struct {
		fd  int
		err error
	}
	done := make(chan opened, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and its
		// mount namespace with it; the mount lives on through the fd.
		runtime.LockOSThread()
		fd, err := mountPrivateTracefs()
		done <- opened{fd, err}
	}()
	o := <-done
	if o.err != nil {
		return "", fmt.Errorf("no tracefs at %s, and none of the bench's own: %w", hostTracefs, o.err)
	}
	return fmt.Sprintf("/proc/self/fd/%d", o.fd), nil
})

// mountPrivateTracefs mounts tracefs in a new mount namespace of the calling
// thread, which must be locked to it, and opens the mount's root.
func mountPrivateTracefs() (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return -1, os.NewSyscallError("unshare mount namespace", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return -1, fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tracefs", hostTracefs, "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return -1, fmt.Errorf("mount tracefs: %w", err)
	}
	fd, err := unix.Open(hostTracefs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: hostTracefs, Err: err}
	}
	return fd, nil
}

// procEvent is one sched_process_exec or sched_process_exit event.
type procEvent struct {
	at   time.Duration // CLOCK_MONOTONIC
	exec bool          // exec, else exit
	pid  int           // the thread's id; an exec's is its process's
	file string        // what an exec ran, as execve was given it
}

// tracer records exec and exit events in an ftrace instance of its own, so
// it neither reads nor changes the host's own tracing.
type tracer struct{ dir string }

func startTracer() (*tracer, error) {
	tracefs, err := tracefsDir()
	if err != nil {
		return nil, err
	}
	removeStaleInstances(tracefs)
	t := &tracer{dir: filepath.Join(tracefs, "instances", fmt.Sprintf("%s%d", instancePrefix, os.Getpid()))}
	if err := os.Mkdir(t.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create ftrace instance: %w", err)
	}
	settings := [][2]string{{"trace_clock", "mono"}, {"buffer_size_kb", "2048"}}
	for _, f := range traceSwitches {
		settings = append(settings, [2]string{f, "1"})
	}
	for _, w := range settings {
		if err := os.WriteFile(filepath.Join(t.dir, w[0]), []byte(w[1]), 0); err != nil {
			t.close()
			return nil, fmt.Errorf("set up ftrace instance: %s: %w", w[0], err)
		}
	}
	return t, nil
}

const instancePrefix = "pmjail-bench-"

// traceSwitches turn the instance's events and tracing on; tracing goes
// last on and first off.
var traceSwitches = []string{"events/sched/sched_process_exec/enable", "events/sched/sched_process_exit/enable", "tracing_on"}

// removeStaleInstances removes the instances of benches that were killed
// before they could: each holds a trace buffer until it is removed.
func removeStaleInstances(tracefs string) {
	dirs, _ := filepath.Glob(filepath.Join(tracefs, "instances", instancePrefix+"*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), instancePrefix))
		if err != nil || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		(&tracer{dir: dir}).close()
	}
}

// close removes the instance; events must be off for the kernel to let it go.
func (t *tracer) close() {
	for _, f := range slices.Backward(traceSwitches) {
		_ = os.WriteFile(filepath.Join(t.dir, f), []byte("0"), 0)
	}
	if err := os.Remove(t.dir); err != nil {
		fmt.Fprintf(os.Stderr, "bench: remove ftrace instance: %v\n", err)
	}
}

// take returns the events recorded since the last take and clears them.
func (t *tracer) take() ([]procEvent, error) {
	path := filepath.Join(t.dir, "trace")
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	events, err := parseTrace(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	// Opening the buffer for writing with O_TRUNC empties it.
	if err := os.WriteFile(path, nil, 0); err != nil {
		return nil, fmt.Errorf("clear %s: %w", path, err)
	}
	return events, nil
}

// parseTrace reads ftrace's text output, e.g.
//
//	deno-1942 [001] ..... 45088.596255: sched_process_exec: filename=/runtime/deno pid=1942 old_pid=1942
//	deno-1942 [001] .N... 45088.620554: sched_process_exit: comm=deno pid=1942 prio=120 group_dead=false
//
// and keeps the two events it knows; a line it cannot read is an error.
func parseTrace(r io.Reader) ([]procEvent, error) {
	var out []procEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		var ev procEvent
		var fields string
		switch {
		case cutEvent(line, ": sched_process_exec: ", &ev, &fields):
			ev.exec = true
			i := strings.LastIndex(fields, " pid=")
			if !strings.HasPrefix(fields, "filename=") || i < 0 {
				return nil, fmt.Errorf("malformed exec event: %q", line)
			}
			ev.file = fields[len("filename="):i]
			fields = fields[i+1:]
		case cutEvent(line, ": sched_process_exit: ", &ev, &fields):
		default:
			continue
		}
		pid, ok := field(fields, "pid")
		if !ok {
			return nil, fmt.Errorf("event without a pid: %q", line)
		}
		var err error
		if ev.pid, err = strconv.Atoi(pid); err != nil {
			return nil, fmt.Errorf("event pid: %q", line)
		}
		if ev.at < 0 {
			return nil, fmt.Errorf("event timestamp: %q", line)
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// cutEvent finds the event name in line and reads the timestamp before it;
// ev.at is -1 when the timestamp is unreadable.
func cutEvent(line, name string, ev *procEvent, fields *string) bool {
	head, rest, ok := strings.Cut(line, name)
	if !ok {
		return false
	}
	*fields = rest
	ev.at = -1
	if i := strings.LastIndexByte(head, ' '); i >= 0 {
		if at, ok := parseStamp(head[i+1:]); ok {
			ev.at = at
		}
	}
	return true
}

// parseStamp reads ftrace's "seconds.fraction" without a float's rounding.
func parseStamp(s string) (time.Duration, bool) {
	sec, frac, _ := strings.Cut(s, ".")
	if len(frac) > 9 {
		return 0, false
	}
	n, err := strconv.ParseUint(sec, 10, 32)
	if err != nil {
		return 0, false
	}
	f := uint64(0)
	if frac != "" {
		if f, err = strconv.ParseUint(frac, 10, 32); err != nil {
			return 0, false
		}
		for range 9 - len(frac) {
			f *= 10
		}
	}
	return time.Duration(n)*time.Second + time.Duration(f), true
}

// field is the value of a space-separated key=value field.
func field(fields, key string) (string, bool) {
	for _, f := range strings.Fields(fields) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// phases is one run cut at its runtime's exec and exit.
type phases struct {
	toExec  time.Duration // the run's start to the runtime's exec
	stage   time.Duration // the init stage's exec to the runtime's (0 without one)
	runtime time.Duration // the runtime's exec to its exec'ing thread's exit
	after   time.Duration // that exit to the run's end
}

// cut finds, among events, the first exec of runtime within the run s and
// its thread's exit, and, when stage is set, the last exec of stage before
// the runtime's. Each run's events are taken alone, so there is no other
// run's exec to mistake for it.
func cut(events []procEvent, s span, runtime, stage string) (phases, error) {
	var p phases
	execAt, exitAt, stageAt := time.Duration(-1), time.Duration(-1), time.Duration(-1)
	pid := 0
	for _, ev := range events {
		if ev.at < s.start || ev.at > s.end {
			continue
		}
		switch {
		case ev.exec && execAt < 0 && ev.file == runtime:
			execAt, pid = ev.at, ev.pid
		case ev.exec && execAt < 0 && stage != "" && ev.file == stage:
			stageAt = ev.at
		case !ev.exec && execAt >= 0 && exitAt < 0 && ev.pid == pid:
			exitAt = ev.at
		}
	}
	switch {
	case execAt < 0:
		return p, fmt.Errorf("no exec of %s in the run", runtime)
	case exitAt < 0:
		return p, fmt.Errorf("no exit of %s (pid %d) in the run", runtime, pid)
	case stage != "" && stageAt < 0:
		return p, fmt.Errorf("no exec of %s before %s", stage, runtime)
	}
	p.toExec, p.runtime, p.after = execAt-s.start, exitAt-execAt, s.end-exitAt
	if stageAt >= 0 {
		p.stage = execAt - stageAt
	}
	return p, nil
}

// phased is a variant and where its runtime appears in the trace.
type phased struct {
	Variant
	runtime string // the runtime's path as it is exec'd (inside the jail for pmjail)
	stage   string // the init stage's path, for pmjail
	role    role
}

// role is what a traced row is to the others: the bare runtime they are
// measured against, a pmjail row, or bubblewrap's, quoted beside each.
type role int

const (
	roleBare role = iota
	rolePmjail
	roleBwrap
)

// phaseBreakdown: a traced pass over the Deno hello and /usr/bin/true
// comparisons, which says in which part of a run pmjail's added time lies.
func (b *Bench) phaseBreakdown(ctx context.Context) error {
	b.Report.Section("Where the added time goes")
	t, err := startTracer()
	if err != nil {
		b.Report.Para("Not measured: %v (the section needs root and tracefs).", err)
		b.Report.Note("phases section skipped: %v", err)
		return nil
	}
	defer t.close()
	stage := filepath.Join(filepath.Dir(b.Pmjail), jail.InitBinaryName)
	deno, err := b.denoVariants()
	if err != nil {
		return err
	}
	native, err := b.trueVariants()
	if err != nil {
		return err
	}
	groups := [][]phased{{
		{deno.bare, b.Deno, "", roleBare}, {deno.pmjail, runtimes.DenoTarget, stage, rolePmjail}, {deno.bwrap, b.Deno, "", roleBwrap},
	}, {
		{native.bare, "/usr/bin/true", "", roleBare}, {native.pmjail, "/usr/bin/true", stage, rolePmjail}, {native.bwrap, "/usr/bin/true", "", roleBwrap},
	}}
	served, err := b.servedHello(ctx)
	if err != nil {
		return err
	}
	if served != nil {
		defer served.stop()
		// The pooled daemon's init stage was exec'd before the request.
		groups[0] = append(groups[0], phased{served.pooled, runtimes.DenoTarget, "", rolePmjail},
			phased{served.unpooled, runtimes.DenoTarget, stage, rolePmjail}, phased{served.submit, runtimes.DenoTarget, "", rolePmjail})
	}
	var rows [][]string
	var lines []string
	for _, g := range groups {
		cuts, err := b.tracedRounds(ctx, t, g, b.Reps, 2)
		if err != nil {
			return err
		}
		med := make([]phases, len(g))
		var base, bw phases
		var bare string
		for i, v := range g {
			med[i] = medianPhases(cuts[i])
			switch v.role {
			case roleBare:
				base, bare = med[i], v.Name
			case roleBwrap:
				bw = med[i]
			}
			stageCell := "—"
			if v.stage != "" {
				stageCell = ms(med[i].stage)
			}
			rows = append(rows, []string{v.Name, ms(med[i].toExec), stageCell, ms(med[i].runtime), ms(med[i].after)})
		}
		// Every pmjail row against the bare one, with bwrap's beside it.
		for i, pm := range med {
			if g[i].role != rolePmjail {
				continue
			}
			lines = append(lines, fmt.Sprintf("- %s against %s: %s before the runtime's exec (bwrap %s), %s while it runs (bwrap %s), %s after its exit (bwrap %s).",
				g[i].Name, bare,
				signedMS(pm.toExec-base.toExec), signedMS(bw.toExec-base.toExec),
				signedMS(pm.runtime-base.runtime), signedMS(bw.runtime-base.runtime),
				signedMS(pm.after-base.after), signedMS(bw.after-base.after)))
		}
	}
	b.Report.Table([]string{"variant", "start → runtime's exec", "of which pmjail-init → runtime", "runtime: exec → exit", "exit → run's end"}, rows)
	b.Report.Para("Medians of %d traced rounds each (interleaved, after 2 warm-up), so the columns need not add up to the tables above. The cuts are the kernel's `sched_process_exec` of the runtime and `sched_process_exit` of the thread that exec'd it, recorded in an ftrace instance of the bench's own on CLOCK_MONOTONIC, the clock the bench's start and end are read on. \"Start\" is just before the bench forks (for the daemon rows, sends the request), \"end\" when it has reaped the command (has read the daemon's answer); the runtime's own teardown (its memory, and for the jails its namespaces) falls after its exit. In the pmjail rows the runtime runs pmjail's bootstrap and channel before the guest's code, under its seccomp filter, in its cgroup.", b.Reps)
	b.Report.Para("%s", strings.Join(lines, "\n"))
	return nil
}

// tracedRounds runs the variants interleaved, as Interleave does, and cuts
// each measured run at its runtime's exec and exit.
func (b *Bench) tracedRounds(ctx context.Context, t *tracer, vs []phased, reps, warmup int) ([][]phases, error) {
	out := make([][]phases, len(vs))
	err := rotate(len(vs), reps, warmup, func(i int, measured bool) error {
		v := vs[i]
		s, err := v.run(ctx)
		if err != nil {
			return err
		}
		// The buffer holds what happened since the last take; cut looks
		// only within this run's span.
		events, err := t.take()
		if err != nil {
			return err
		}
		p, err := cut(events, s, v.runtime, v.stage)
		if err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
		if measured {
			out[i] = append(out[i], p)
		}
		return nil
	})
	return out, err
}

// medianPhases takes each phase's median on its own.
func medianPhases(ps []phases) phases {
	if len(ps) == 0 {
		return phases{}
	}
	col := func(f func(phases) time.Duration) time.Duration {
		v := make([]time.Duration, len(ps))
		for i, p := range ps {
			v[i] = f(p)
		}
		return Summarize(v).Median
	}
	return phases{
		toExec:  col(func(p phases) time.Duration { return p.toExec }),
		stage:   col(func(p phases) time.Duration { return p.stage }),
		runtime: col(func(p phases) time.Duration { return p.runtime }),
		after:   col(func(p phases) time.Duration { return p.after }),
	}
}
