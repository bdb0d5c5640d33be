package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/jail"
	"golang.org/x/sys/unix"
)

// hello is the smallest real run.
func hello() *api.Job { return &api.Job{Runtime: "deno", Source: `console.log(1)`} }

// runMany sends n hello runs through c from conc workers and returns how
// many came back ok; every other outcome is reported.
func runMany(t testing.TB, c *client.Client, n, conc int) int64 {
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				res, err := c.Run(ctx, hello())
				cancel()
				switch {
				case err != nil:
					t.Errorf("run: %v", err)
				case res.Status != jail.StatusOK || res.Stdout != "1\n":
					t.Errorf("run %s: %s %q %+v", res.ID, res.Status, res.Stdout, res.Error)
				default:
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load()
}

// rssKB reads a process's resident set.
func rssKB(t testing.TB, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

func TestDaemonLoad(t *testing.T) {
	const total = 500
	const conc = 8
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, conc, 2*conc, "0660"))
	t0 := time.Now()
	warm := runMany(t, d.c, 100, conc)
	rss100 := rssKB(t, d.pid())
	rest := runMany(t, d.c, total-100, conc)
	rssEnd := rssKB(t, d.pid())
	elapsed := time.Since(t0)
	t.Logf("%d runs at concurrency %d in %v (%.1f runs/s); daemon RSS %d kB after 100, %d kB after %d",
		total, conc, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), rss100, rssEnd, total)
	if got := warm + rest; got != int64(total) {
		t.Errorf("%d of %d runs came back ok", got, total)
	}
	if grow := rssEnd - rss100; grow > 30<<10 {
		t.Errorf("daemon RSS grew by %d kB between run 100 and run %d", grow, total)
	}
	m, err := d.c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := metricSum(t, m, "pmjail_runs_total", map[string]string{"status": "ok", "tenant": "others"}); n != total {
		t.Errorf("pmjail_runs_total{status=ok,tenant=others}: %v, want %d", n, total)
	}
	if cgs := runCgroups(d.pid()); len(cgs) > 0 {
		t.Errorf("job cgroups left after the runs: %v", cgs)
	}
	// The idle daemon's only children are the init stages it keeps
	// started for the next runs, waiting, each with its cgroup; they end
	// with it.
	// The pool may still be filling: a refill makes its init stage's
	// cgroup just before it starts it.
	var waiting []int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		waiting = waitingInitStages(t, d)
		held := reservedCgroups(d.pid())
		if len(held) == len(waiting) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the idle daemon holds cgroups %v for its %d waiting init stages, want one each", held, len(waiting))
			break
		}
	}
	d.stop(t)
	for _, pid := range waiting {
		if !gone(pid) {
			t.Errorf("prestarted init stage %d outlived the daemon", pid)
		}
	}
	if left := jobCgroups(d.pid()); len(left) > 0 {
		t.Errorf("cgroups left after the daemon stopped: %v", left)
	}
}

// waitingInitStages waits until the daemon's children are exactly the
// prestarted init stages its health reports, each asleep in the daemon's
// init stage binary, and returns their pids.
func waitingInitStages(t *testing.T, d *daemon) []int {
	t.Helper()
	initStage := initStageBinary(t, d)
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids := childrenOf(d.pid())
		h, err := d.c.Health(context.Background())
		// Warm runtimes wait under an init stage too (their jail's pid 1).
		want := 0
		if err == nil {
			want = h.Pooled
			if h.Warm != nil {
				for _, n := range h.Warm.Idle {
					want += n
				}
			}
		}
		settled := err == nil && len(kids) == want
		for _, pid := range kids {
			exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			settled = settled && exe == initStage && procState(pid) == "S"
		}
		if settled {
			return kids
		}
		if time.Now().After(deadline) {
			var states []string
			for _, pid := range kids {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				states = append(states, fmt.Sprintf("%d:%s:%s", pid, exe, procState(pid)))
			}
			t.Fatalf("the idle daemon's children (pid:exe:state) %v are not its %+v prestarted init stages, each asleep in %s (%v)", states, h, initStage, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// initStageBinary is the file the daemon's init stages run, as `pmjail
// version` reports it: the pmjail-init beside a make-built pmjail, or the
// daemon's own binary when there is none (the harness's plain go build).
func initStageBinary(t *testing.T, d *daemon) string {
	t.Helper()
	v := pmjailCmd(t, "", "version")
	for line := range strings.Lines(v.Stdout) {
		path, ok := strings.CutPrefix(strings.TrimSpace(line), "init stage: ")
		switch {
		case !ok:
		case strings.HasPrefix(path, "this binary ("):
			self, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", d.pid()))
			if err != nil {
				t.Fatalf("the daemon's binary: %v", err)
			}
			return self
		default:
			return path
		}
	}
	t.Fatalf("pmjail version names no init stage: %q (exit %d, %s)", v.Stdout, v.ExitCode, v.Stderr)
	return ""
}

// gone reports whether pid has ended and been reaped, waiting a little.
func gone(pid int) bool {
	for range 100 {
		if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestDaemonCrashRecovery SIGKILLs a daemon with cold runs in flight: it
// counts their cgroups and guests, which warm runtimes (off here) would
// stand in for before any run started; TestDaemonWarmKilled kills one
// with a warm run in flight.
func TestDaemonCrashRecovery(t *testing.T) {
	dir := daemonDir(t)
	cfg := `{"version": 1, "max_concurrency": 4, "max_queue": 8, "socket": {"mode": "0660"}, "warm": {"deno": 0}}`
	d := startDaemon(t, dir, cfg)
	// Load that is mid-run when the daemon dies.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = d.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: `await new Promise(r => setTimeout(r, 20000))`})
		}()
	}
	deadline := time.Now().Add(60 * time.Second)
	var orphans []string
	for len(orphans) < 4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		orphans = jobCgroups(d.pid())
	}
	if len(orphans) == 0 {
		t.Fatalf("no job cgroups of pid %d appeared under load", d.pid())
	}
	// Kill it once its guests run, so that their parent-death signal is
	// what ends them, not the next start's sweep.
	var guests []int
	for len(guests) < 4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		guests = named(descendants(d.pid()), "deno")
	}
	if len(guests) == 0 {
		t.Fatalf("no guest of pid %d started under load", d.pid())
	}
	oldPID := d.pid()
	d.kill()
	if living := outliving(guests, 2*time.Second); len(living) > 0 {
		t.Errorf("guest processes %v outlived the SIGKILLed daemon by 2s", describePids(living))
	}
	wg.Wait() // the clients see their connections drop
	if left := jobCgroups(oldPID); len(left) == 0 {
		t.Fatalf("the killed daemon's cgroups vanished by themselves; nothing to sweep")
	} else {
		t.Logf("the SIGKILLed daemon %d left %d cgroup dirs, e.g. %s", oldPID, len(left), left[0])
	}

	d2 := startDaemon(t, dir, cfg) // the stale socket file is replaced
	if left := jobCgroups(oldPID); len(left) > 0 {
		t.Errorf("cgroups of the dead daemon left after restart: %v", left)
	}
	if !strings.Contains(d2.logs.String(), "swept cgroups left by a previous instance") {
		t.Errorf("the restart did not log its sweep:\n%s", d2.logs)
	}
	res, err := d2.c.Run(context.Background(), hello())
	if err != nil || res.Status != jail.StatusOK {
		t.Fatalf("run after restart: %+v %v", res, err)
	}
}

// BenchmarkDaemonThroughput measures hello runs per second through the
// daemon at concurrency 1, 2 and 4.
func BenchmarkDaemonThroughput(b *testing.B) {
	d := startDaemon(b, daemonDir(b), fmt.Sprintf(baseConfig, 4, 8, "0660"))
	runMany(b, d.c, 4, 4) // warm the page cache
	for _, conc := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("conc-%d", conc), func(b *testing.B) {
			t0 := time.Now()
			b.ResetTimer()
			ok := runMany(b, d.c, b.N, conc)
			b.StopTimer()
			if ok != int64(b.N) {
				b.Fatalf("%d of %d runs ok", ok, b.N)
			}
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "runs/s")
		})
	}
}
