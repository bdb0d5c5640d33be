package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pmjail/pmjail/cgroup"
)

// leakState is everything a run could leave behind on the host.
type leakState struct {
	Cgroups, Mounts, TmpDirs, Zombies []string
	// Reserved names the cgroups a daemon's waiting init stages hold
	// (cgroup.Manager.Reserve), one per init stage: they come and go with
	// the pool, so they are counted, not compared by name.
	Reserved []string
}

func snapshotLeaks() leakState {
	var s leakState
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a cgroup removed while walking
		}
		switch {
		case !d.IsDir() || !strings.HasPrefix(d.Name(), "pmjail-"):
		case cgroup.Reserved(d.Name()):
			if !slices.Contains(s.Reserved, d.Name()) {
				s.Reserved = append(s.Reserved, d.Name())
			}
		default:
			s.Cgroups = append(s.Cgroups, path)
		}
		return nil
	})
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "pmjail") {
				s.Mounts = append(s.Mounts, l)
			}
		}
	}
	s.TmpDirs, _ = filepath.Glob("/tmp/pmjail*")
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so cut at the last ')'.
		st := string(data)
		if i := strings.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
			s.Zombies = append(s.Zombies, strings.TrimSpace(st[:i+1]))
		}
	}
	return s
}

// added is what is in after but not in before.
func added(before, after []string) []string {
	var out []string
	for _, x := range after {
		if !slices.Contains(before, x) {
			out = append(out, x)
		}
	}
	return out
}

// soak runs many jobs in a row and compares the first hundred with the
// last, then checks that nothing was left behind.
func (b *Bench) soak(ctx context.Context) error {
	b.Report.Section("Soak")
	var dStart DaemonStats
	if b.Daemon != nil {
		var err error
		if dStart, err = b.Daemon.PoolFullStats(ctx); err != nil {
			return err
		}
	}
	// With the daemon's pool full, as at the end.
	before := snapshotLeaks()

	native := Variant{Name: "pmjail exec -- /usr/bin/true", Argv: []string{b.Pmjail, "exec", "--", "/usr/bin/true"}, Dir: b.Work}
	nativeTimes, err := sequence(ctx, b.Soak, native.Once)
	if err != nil {
		return err
	}
	denoName := "pmjail run hello.js (one-shot CLI)"
	denoOnce := Variant{Argv: []string{b.Pmjail, "run", "hello.js"}, Dir: b.Work, Want: "hello"}.Once
	if b.Daemon != nil {
		denoName = "Deno hello through the daemon (POST /v1/runs)"
		denoOnce = func(ctx context.Context) (time.Duration, error) {
			t := time.Now()
			err := b.Daemon.Hello(ctx)
			return time.Since(t), err
		}
	}
	denoTimes, err := sequence(ctx, b.SoakDeno, denoOnce)
	if err != nil {
		return err
	}

	var rows [][]string
	for _, s := range []struct {
		name  string
		times []time.Duration
	}{{native.Name, nativeTimes}, {denoName, denoTimes}} {
		if len(s.times) == 0 {
			continue
		}
		k := min(100, len(s.times)/2)
		first, last := Summarize(s.times[:k]), Summarize(s.times[len(s.times)-k:])
		all := Summarize(s.times)
		rows = append(rows, []string{s.name, fmt.Sprint(len(s.times)), fmt.Sprint(k),
			ms(first.P50), ms(first.P99), ms(last.P50), ms(last.P99), ms(all.P50), ms(all.P99)})
		// Growth means the last hundred's median is more than 10% (and
		// 1 ms) above the first hundred's: noise on a shared 2-core host
		// moves single runs far more than that, medians much less.
		grown := last.P50 > first.P50+first.P50/10+time.Millisecond
		b.Report.Target(fmt.Sprintf("soak, %s: no latency growth (last %d p50 ≤ first %d p50 +10%% +1 ms)", s.name, k, k),
			fmt.Sprintf("%s → %s", ms(first.P50), ms(last.P50)), !grown)
	}
	b.Report.Table([]string{"series", "runs", "window", "first p50", "first p99", "last p50", "last p99", "all p50", "all p99"}, rows)
	b.Report.Para("Sequential runs: %d × `pmjail exec -- /usr/bin/true` (the bulk, to keep the soak fast), then %d × %s. `make bench` runs a short soak (its Deno series as long as the full one's: a 25-run window moved its median by ±4 ms on this host); `make soak` runs the full 2,000 + 200.", b.Soak, b.SoakDeno, denoName)

	time.Sleep(time.Second) // let the last cleanups land
	var dEnd DaemonStats
	if b.Daemon != nil {
		// With the pool full again, as at the start.
		if dEnd, err = b.Daemon.PoolFullStats(ctx); err != nil {
			return err
		}
	}
	after := snapshotLeaks()
	leakRows := [][]string{
		{"cgroups (`find /sys/fs/cgroup -name 'pmjail-*'`)", fmt.Sprint(len(before.Cgroups)), fmt.Sprint(len(after.Cgroups)), list(added(before.Cgroups, after.Cgroups))},
		{"mounts (`grep pmjail /proc/self/mountinfo`)", fmt.Sprint(len(before.Mounts)), fmt.Sprint(len(after.Mounts)), list(added(before.Mounts, after.Mounts))},
		{"temp dirs (`/tmp/pmjail*`)", fmt.Sprint(len(before.TmpDirs)), fmt.Sprint(len(after.TmpDirs)), list(added(before.TmpDirs, after.TmpDirs))},
		{"zombies (state Z, whole host)", fmt.Sprint(len(before.Zombies)), fmt.Sprint(len(after.Zombies)), list(added(before.Zombies, after.Zombies))},
	}
	leaked := len(added(before.Cgroups, after.Cgroups)) + len(added(before.Mounts, after.Mounts)) + len(added(before.TmpDirs, after.TmpDirs)) + len(added(before.Zombies, after.Zombies))
	if b.Daemon != nil {
		leakRows = append(leakRows,
			[]string{"daemon init stages waiting (prestart)", fmt.Sprint(dStart.Pooled), fmt.Sprint(dEnd.Pooled), signedInt(dEnd.Pooled - dStart.Pooled)},
			[]string{"their cgroups (`pmjail-*-prestart-*`), one each", fmt.Sprint(len(before.Reserved)), fmt.Sprint(len(after.Reserved)), signedInt(len(after.Reserved) - len(before.Reserved))},
			[]string{"daemon open fds", fmt.Sprint(dStart.FDs), fmt.Sprint(dEnd.FDs), signedInt(dEnd.FDs - dStart.FDs)},
			[]string{"daemon RSS", kib(dStart.RSS), kib(dEnd.RSS), fmt.Sprintf("%+.1f MiB", float64(dEnd.RSS-dStart.RSS)/1024)})
		// Fds are comparable only with as many init stages waiting: a pool
		// that could not be levelled counts against the check.
		if dEnd.FDs > dStart.FDs || dEnd.Pooled != dStart.Pooled || len(after.Reserved) != dEnd.Pooled {
			leaked++
		}
	} else {
		leakRows = append(leakRows, []string{"fds", "N/A", "N/A", "one-shot CLI: every run's supervisor exits; no daemon to watch"})
	}
	b.Report.Table([]string{"leak check", "before", "after", "new"}, leakRows)
	b.Report.Para("Other work on this machine (tests of other packages) may create and remove pmjail cgroups and temp dirs at the same time; \"new\" lists what appeared during the soak and was still there a second after it.")
	b.Report.Target("soak leaves nothing behind (cgroups, mounts, temp dirs, zombies, daemon fds)", fmt.Sprintf("%d new", leaked), leaked == 0)
	return nil
}

// sequence runs one n times in a row and returns each duration.
func sequence(ctx context.Context, n int, one func(context.Context) (time.Duration, error)) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		d, err := one(ctx)
		if err != nil {
			return out, fmt.Errorf("run %d of %d: %w", i+1, n, err)
		}
		out = append(out, d)
	}
	return out, nil
}

func list(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	if len(items) > 5 {
		return fmt.Sprintf("%s … (%d)", strings.Join(items[:5], ", "), len(items))
	}
	return strings.Join(items, ", ")
}

func signedInt(n int) string { return fmt.Sprintf("%+d", n) }
