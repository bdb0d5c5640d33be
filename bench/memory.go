package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// memory: the supervisor's own peak RSS for one run, and the daemon's.
func (b *Bench) memory(ctx context.Context) error {
	b.Report.Section("pmjail's own memory")
	const runs = 5
	type probe struct {
		name string
		argv []string
	}
	probes := []probe{
		{"pmjail run hello.js", []string{b.Pmjail, "run", "hello.js"}},
		{"pmjail exec -- /usr/bin/true", []string{b.Pmjail, "exec", "--", "/usr/bin/true"}},
		{"bare deno run hello.js (for scale)", []string{b.Deno, "run", "hello.js"}},
	}
	var rows [][]string
	for _, p := range probes {
		var hwm, timeM []int64
		for i := 0; i < runs; i++ {
			h, err := b.supervisorHWM(ctx, p.argv)
			if err != nil {
				return err
			}
			m, err := b.timeMaxRSS(ctx, p.argv)
			if err != nil {
				return err
			}
			hwm, timeM = append(hwm, h), append(timeM, m)
		}
		rows = append(rows, []string{p.name, kib(medianInt(hwm)), kib(medianInt(timeM))})
	}
	b.Report.Table([]string{"command", "the process itself: VmHWM (median of 5)", "`/usr/bin/time -f %M` (median of 5)"}, rows)
	b.Report.Para("VmHWM is read from /proc/PID/status of the pmjail process every 2 ms until it exits: the supervisor alone, not the guest (the guest is another process). `/usr/bin/time -f %%M` reports the kernel's maxrss for the child *including the descendants it waited for*, so for pmjail it is the larger of the supervisor and the guest's runtime (Deno's ~30 MB) — not the supervisor's cost.")
	if b.Daemon == nil {
		b.Report.Para("Daemon RSS: skipped: daemon not available.")
		return nil
	}
	st, err := b.Daemon.Stats()
	if err != nil {
		return err
	}
	b.Report.Para("Daemon (`pmjail serve`) RSS idle right after start: %s; now (after the sections above, idle): %s (VmHWM %s, %d open fds). Besides, %d init stages wait, started ahead of runs (config `prestart`), %s RSS in all (mostly pmjail-init's shared text).",
		kib(b.Daemon.StartRSS), kib(st.RSS), kib(st.HWM), st.FDs, st.Children, kib(st.ChildRSS))
	return nil
}

// supervisorHWM runs argv in the scratch directory and returns the peak
// resident set (KiB) of that process alone, sampled from /proc.
func (b *Bench) supervisorHWM(ctx context.Context, argv []string) (int64, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = b.Work
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		// VmHWM only grows, so the last read before exit is the closest.
		if v, err := procStatusKiB(cmd.Process.Pid, "VmHWM"); err == nil && v > peak {
			peak = v
		}
		select {
		case err := <-done:
			if err != nil {
				return 0, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
			}
			return peak, nil
		case <-tick.C:
		}
	}
}

// timeMaxRSS is GNU time's %M (KiB) for argv.
func (b *Bench) timeMaxRSS(ctx context.Context, argv []string) (int64, error) {
	f, err := os.CreateTemp(b.Work, "time-")
	if err != nil {
		return 0, err
	}
	f.Close()
	defer os.Remove(f.Name())
	cmd := exec.CommandContext(ctx, "/usr/bin/time", append([]string{"-o", f.Name(), "-f", "%M"}, argv...)...)
	cmd.Dir = b.Work
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("/usr/bin/time %s: %w: %s", strings.Join(argv, " "), err, tail(string(out)))
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(lastLine(string(data))), 10, 64)
}

// procStatusKiB reads one "Key: N kB" field of /proc/PID/status.
func procStatusKiB(pid int, key string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

func medianInt(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func kib(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/1024) }

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
