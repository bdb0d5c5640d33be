package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/job"
)

// Daemon is a `pmjail serve` started for the bench on a private socket.
type Daemon struct {
	Socket   string
	Cmd      *exec.Cmd
	Client   *client.Client
	StartRSS int64 // KiB, once healthy and idle
	done     chan error
}

// deployedConfig lets four runs go at once (the highest concurrency
// measured) and queues the rest, with the defaults a deployed daemon
// has: init stages and warm Deno runtimes started ahead of runs.
const deployedConfig = `{"version": 1, "max_concurrency": 4, "max_queue": 64, "log_level": "warn"}`

// daemonConfig is deployedConfig without warm runtimes: the init-stage
// pool alone, the path the latency, phase and file sections trace (a warm
// run execs nothing, and several-file jobs are served cold); the warm
// section and the throughput section measure the warm path.
const daemonConfig = `{"version": 1, "max_concurrency": 4, "max_queue": 64, "log_level": "warn", "warm": {"deno": 0}}`

// coldDaemonConfig is daemonConfig with no init stage started ahead of
// runs: what prestart buys is measured against it.
const coldDaemonConfig = `{"version": 1, "max_concurrency": 4, "max_queue": 64, "log_level": "warn", "prestart": -1, "warm": {"deno": 0}}`

// helloJob is the daemon's Deno hello, the example job.
func helloJob() *job.Request { return &job.Request{Runtime: "deno", Source: "console.log(1)"} }

// StartDaemon starts `pmjail serve` under daemonConfig and waits until it
// answers /v1/health; it fails fast when this pmjail has no serve command.
func StartDaemon(ctx context.Context, b *Bench) (*Daemon, error) {
	return startDaemon(ctx, b, "daemon", daemonConfig)
}

// startDaemon starts a daemon under config, its files named after name.
func startDaemon(ctx context.Context, b *Bench, name, config string) (*Daemon, error) {
	// `pmjail serve` execs pmjail-serve from beside pmjail, or runs the
	// daemon itself when built alone; version says whether it can.
	out, _ := exec.Command(b.Pmjail, "version").Output()
	if _, why, ok := strings.Cut(string(out), "daemon: unavailable"); ok {
		why, _, _ = strings.Cut(why, "\n")
		return nil, fmt.Errorf("skipped: no daemon beside %s%s", b.Pmjail, why)
	}
	cfg := b.work(name + ".json")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(b.work(name + ".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d := &Daemon{Socket: b.work(name + ".sock"), done: make(chan error, 1)}
	d.Cmd = exec.Command(b.Pmjail, "serve", "--socket", d.Socket, "--config", cfg)
	d.Cmd.Dir = b.Work
	d.Cmd.Stdout, d.Cmd.Stderr = logf, logf
	if err := d.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pmjail serve: %w", err)
	}
	go func() { d.done <- d.Cmd.Wait() }()
	d.Client = client.New(d.Socket)
	deadline := time.Now().Add(20 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := d.Client.Health(hctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-d.done:
			log, _ := os.ReadFile(b.work(name + ".log"))
			return nil, fmt.Errorf("pmjail serve exited (%v): %s", werr, tail(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			d.Stop()
			return nil, fmt.Errorf("pmjail serve not healthy after 20s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// One run first, so that the idle figure includes what any daemon
	// holds after its first job (compiled filters, the posture probe).
	if err := d.Hello(ctx); err != nil {
		d.Stop()
		return nil, err
	}
	time.Sleep(500 * time.Millisecond)
	st, err := d.Stats()
	if err != nil {
		d.Stop()
		return nil, err
	}
	d.StartRSS = st.RSS
	return d, nil
}

// Hello runs the hello job and checks its result.
func (d *Daemon) Hello(ctx context.Context) error {
	return d.runDeno(ctx, helloJob(), "1\n")
}

// runDeno runs req and checks that it succeeded and printed stdout.
func (d *Daemon) runDeno(ctx context.Context, req *job.Request, stdout string) error {
	wire, err := req.API()
	if err != nil {
		return err
	}
	res, err := d.Client.Run(ctx, wire)
	if err != nil {
		return fmt.Errorf("daemon run: %w", err)
	}
	if res.Status != "ok" || res.Stdout != stdout {
		return fmt.Errorf("daemon run: status %s, stdout %q, error %+v", res.Status, res.Stdout, res.Error)
	}
	return nil
}

// awaitPool waits until at least n init stages wait for runs again, as
// after an idle spell; a pool that does not refill within a few seconds is
// an error, since every later request would then measure a cold start.
func (d *Daemon) awaitPool(ctx context.Context, n int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		h, err := d.Client.Health(ctx)
		if err != nil {
			return err
		}
		if h.Pooled >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pool of init stages holds %d, not %d, 5s after a run", h.Pooled, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// helloVariant times the Deno job of source as a request to the daemon,
// each arriving with the daemon idle and pool init stages waiting (the
// pool refilled off the clock).
func (d *Daemon) helloVariant(name, source, stdout string, pool int) (Variant, error) {
	req := &job.Request{Runtime: "deno", Source: source}
	body, err := json.Marshal(req)
	if err != nil {
		return Variant{}, err
	}
	return Variant{
		Name:  name,
		Call:  func(ctx context.Context) error { return d.runDeno(ctx, req, stdout) },
		After: func(ctx context.Context) error { return d.awaitPool(ctx, pool) },
		Shown: fmt.Sprintf("curl --unix-socket %s -d '%s' http://pmjail/v1/runs", d.Socket, body),
	}, nil
}

// SettledStats returns the daemon's figures once the init stages it keeps
// started ahead of runs have stopped changing in number (each holds a few
// of its fds): a leak check compares like with like, not a pool caught
// refilling with a full one.
func (d *Daemon) SettledStats(ctx context.Context) (DaemonStats, error) {
	last, same := -1, 0
	for deadline := time.Now().Add(10 * time.Second); same < 3 && time.Now().Before(deadline); {
		h, err := d.Client.Health(ctx)
		if err != nil {
			return DaemonStats{}, err
		}
		if h.Pooled == last {
			same++
		} else {
			last, same = h.Pooled, 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := d.Stats()
	st.Pooled = last
	return st, err
}

// PoolFullStats is SettledStats with the pool of init stages as full as
// runs make it. A refill waits for a spare core, so a busy host can leave
// the pool short after a burst, and every waiting init stage holds fds of
// the daemon's: the soak's fd check compares two full pools. A run tops the
// pool up; where the daemon keeps none (cgroup v2) it stays empty.
func (d *Daemon) PoolFullStats(ctx context.Context) (DaemonStats, error) {
	h, err := d.Client.Health(ctx)
	if err != nil {
		return DaemonStats{}, err
	}
	for tries := 0; ; tries++ {
		st, err := d.SettledStats(ctx)
		if err != nil || st.Pooled >= h.MaxConcurrency || tries == 5 {
			return st, err
		}
		if err := d.Hello(ctx); err != nil {
			return st, err
		}
	}
}

// Stop sends SIGTERM, waits, and kills the daemon if it lingers.
func (d *Daemon) Stop() {
	d.Client.Close()
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		_ = d.Cmd.Process.Kill()
		<-d.done
	}
}

// DaemonStats are what leak checks read of the daemon process.
type DaemonStats struct {
	RSS, HWM int64 // KiB
	FDs      int
	// Children are the daemon's child processes (when idle: the init
	// stages it keeps started ahead of runs) and ChildRSS their RSS in all.
	Children int
	ChildRSS int64 // KiB
	// Pooled is what the daemon's health reports (SettledStats only).
	Pooled int
}

func (d *Daemon) Stats() (DaemonStats, error) {
	pid := d.Cmd.Process.Pid
	var st DaemonStats
	var err error
	if st.RSS, err = procStatusKiB(pid, "VmRSS"); err != nil {
		return st, err
	}
	if st.HWM, err = procStatusKiB(pid, "VmHWM"); err != nil {
		return st, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return st, err
	}
	st.FDs = len(fds)
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, tf := range tasks {
		data, _ := os.ReadFile(tf)
		for _, c := range strings.Fields(string(data)) {
			child, _ := strconv.Atoi(c)
			if rss, err := procStatusKiB(child, "VmRSS"); err == nil {
				st.Children++
				st.ChildRSS += rss
			}
		}
	}
	return st, nil
}

// side is one side of the throughput: its job, its supervisor's own CPU
// time so far (pmjail-serve's; nil: none), and what it waits for after a
// batch, off the clock, before CPU time is read (nil: nothing).
type side struct {
	run    func(context.Context) error
	own    func() (time.Duration, error)
	settle func(context.Context) error
}

// inTurns measures rounds batches of n runs at concurrency c of each
// side, the sides taking turns (each round starts with another side, so
// drift hits all alike): the rates, side by side.
func inTurns(ctx context.Context, rounds, n, c int, sides []func(context.Context) error) ([][]float64, error) {
	rates := make([][]float64, len(sides))
	for r := range rounds {
		for k := range sides {
			i := (k + r) % len(sides)
			rate, err := batch(ctx, n, c, sides[i])
			if err != nil {
				return nil, err
			}
			rates[i] = append(rates[i], rate)
		}
	}
	return rates, nil
}

// inTurnsCPU is inTurns with each side's CPU time per run (ms) beside its
// rates: the whole machine's busy time (machineCPU), and its supervisor's
// own.
func inTurnsCPU(ctx context.Context, rounds, n, c int, sides []side) (rates, cpus, owns [][]float64, err error) {
	rates, cpus, owns = make([][]float64, len(sides)), make([][]float64, len(sides)), make([][]float64, len(sides))
	perRun := func(d time.Duration) float64 { return float64(d) / float64(n) / float64(time.Millisecond) }
	for r := range rounds {
		for k := range sides {
			i := (k + r) % len(sides)
			own0, err := sides[i].ownCPU()
			if err != nil {
				return nil, nil, nil, err
			}
			all0, err := machineCPU()
			if err != nil {
				return nil, nil, nil, err
			}
			rate, err := batch(ctx, n, c, sides[i].run)
			if err != nil {
				return nil, nil, nil, err
			}
			if sides[i].settle != nil {
				if err := sides[i].settle(ctx); err != nil {
					return nil, nil, nil, err
				}
			}
			all1, err := machineCPU()
			if err != nil {
				return nil, nil, nil, err
			}
			own1, err := sides[i].ownCPU()
			if err != nil {
				return nil, nil, nil, err
			}
			rates[i] = append(rates[i], rate)
			cpus[i] = append(cpus[i], perRun(all1-all0))
			owns[i] = append(owns[i], perRun(own1-own0))
		}
	}
	return rates, cpus, owns, nil
}

// machineCPU is the time every CPU of the machine has been busy
// (/proc/stat's first line less idle and iowait): a run's whole cost,
// the kernel's workers (a network namespace's teardown, freed memory)
// and the client's included, on every side alike. Counting a daemon's
// process tree instead misses what its init stages never reaped
// themselves: a jail ended on its exit frame is killed whole.
func machineCPU() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q", line)
	}
	var busy int64
	for k, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		// user nice system idle iowait irq softirq steal (guest time is
		// in user already).
		if k != 3 && k != 4 && k < 8 {
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times on Linux.
const clockTicks = 100

// ownCPU is the daemon process's own CPU time (/proc/PID/stat's utime
// and stime), its children's left out.
func (d *Daemon) ownCPU() (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields from the state on (the third); utime is the 14th.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", d.Cmd.Process.Pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", d.Cmd.Process.Pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ownCPU is the side's supervisor's own CPU time, 0 for a side without
// one (the bare loop).
func (s side) ownCPU() (time.Duration, error) {
	if s.own == nil {
		return 0, nil
	}
	return s.own()
}

// settle waits until the init stages and runtimes the daemon keeps started
// ahead of runs stop changing in number (a quarter of a second alike, at
// most ten seconds): the refills a batch caused are then in its CPU time,
// not in another side's batch.
func (d *Daemon) settle(ctx context.Context) error {
	last, same := "", 0
	for deadline := time.Now().Add(10 * time.Second); same < 5 && time.Now().Before(deadline); {
		h, err := d.Client.Health(ctx)
		if err != nil {
			return err
		}
		now := fmt.Sprint(h.Pooled)
		if h.Warm != nil {
			now += fmt.Sprint(h.Warm.Idle)
		}
		if now == last {
			same++
		} else {
			last, same = now, 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// batch runs n jobs with c workers and returns runs per second.
func batch(ctx context.Context, n, c int, one func(context.Context) error) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := one(ctx); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// daemonThroughput: jobs per second through the daemon against a bare
// Deno loop at the same concurrency, and against a second daemon that
// starts no init stage ahead of runs; batches take turns.
func (b *Bench) daemonThroughput(ctx context.Context) error {
	b.Report.Section("Daemon throughput")
	if b.Daemon == nil {
		b.Report.Para("skipped: daemon not built or not starting (see the notes at the top).")
		for _, c := range []int{1, 2, 4} {
			b.Report.Skip(fmt.Sprintf("daemon throughput ≥ 95%% of the bare loop at concurrency %d", c), "skipped: daemon not built")
		}
		return nil
	}
	cold, err := startDaemon(ctx, b, "daemon-cold", coldDaemonConfig)
	if err != nil {
		return fmt.Errorf("daemon without prestart: %w", err)
	}
	defer cold.Stop()
	warm, err := startDaemon(ctx, b, "daemon-deployed", deployedConfig)
	if err != nil {
		return fmt.Errorf("daemon with warm runtimes: %w", err)
	}
	defer warm.Stop()
	bare := Variant{Name: "bare", Argv: []string{b.Deno, "run", "hello.js"}, Dir: b.Work, FreshDenoDir: true, Want: "hello"}
	sides := []side{
		{run: warm.Hello, own: warm.ownCPU, settle: warm.settle},
		{run: cold.Hello, own: cold.ownCPU, settle: cold.settle},
		{run: func(ctx context.Context) error { _, err := bare.Once(ctx); return err }},
	}
	// Batches of a second or more at each concurrency, five per side: a
	// shorter batch moved by several points from one run to the next.
	const rounds = 5
	var rows, cpuRows [][]string
	for _, c := range []int{1, 2, 4} {
		n := 32 * c
		rates, cpus, owns, err := inTurnsCPU(ctx, rounds, n, c, sides)
		if err != nil {
			return err
		}
		dc, cc, bc := medianF(cpus[0]), medianF(cpus[1]), medianF(cpus[2])
		cpuRows = append(cpuRows, []string{fmt.Sprint(c), fmt.Sprintf("%.1f ms", dc), fmt.Sprintf("%.1f ms", medianF(owns[0])),
			fmt.Sprintf("%.1f ms", cc), fmt.Sprintf("%.1f ms", medianF(owns[1])), fmt.Sprintf("%.1f ms", bc),
			fmt.Sprintf("%+.1f ms (%.2f×)", dc-bc, dc/bc)})
		dm, cm, bm := medianF(rates[0]), medianF(rates[1]), medianF(rates[2])
		ratio := dm / bm
		span := func(v []float64, m float64) string {
			return fmt.Sprintf("%.1f/s (%.1f – %.1f)", m, minF(v), maxF(v))
		}
		rows = append(rows, []string{fmt.Sprint(c), fmt.Sprint(n), span(rates[0], dm), span(rates[1], cm), span(rates[2], bm),
			percentBelow(ratio), percentBelow(cm / bm)})
		b.Report.Target(fmt.Sprintf("daemon throughput ≥ 95%% of the bare loop at concurrency %d", c), percentBelow(ratio), ratio >= 0.95)
	}
	b.Report.Table([]string{"concurrency", "runs per batch", "daemon (median, min – max)", "daemon, prestart -1", "bare deno loop", "daemon / bare", "prestart -1 / bare"}, rows)
	b.Report.Para("%d batches per side and concurrency, the three sides taking turns (which goes first rotates). The daemon runs `{\"runtime\":\"deno\",\"source\":\"console.log(1)\"}` through `POST /v1/runs` with the Go client (package client) — the same as `curl --unix-socket SOCK -d '{\"runtime\":\"deno\",\"source\":\"console.log(1)\"}' http://pmjail/v1/runs` — under config `%s` (a deployed daemon's defaults), which keeps as many init stages started ahead of runs as there are slots (`prestart` defaults to `max_concurrency`), each waiting with its cgroup made and the last run's root mounted, and as many warm Deno runtimes (`warm` defaults to `max_concurrency`: whole jails whose Deno waits for its start frame); the second daemon runs under `%s`, so each of its runs clones and starts its own init stage and runtime. The bare loop runs `DENO_DIR=$(mktemp -d) deno run hello.js` (a fresh DENO_DIR each run, as every jailed run has). This machine has %d cores, so concurrency 4 measures queueing as much as parallelism.", rounds, deployedConfig, coldDaemonConfig, runtime.NumCPU())
	// With every core busy (concurrency 2 and up) a side's rate is its
	// CPU time per run: the figure the rates follow, shown beside them.
	b.Report.Table([]string{"concurrency", "CPU per run: daemon", "of it pmjail-serve's own", "daemon, prestart -1", "of it pmjail-serve's own", "bare deno loop", "daemon − bare"}, cpuRows)
	b.Report.Para("CPU time per run, median of the same batches: the whole machine's busy time (`/proc/stat`: every CPU's time less idle and iowait) over the batch and, for a daemon, until the init stages and runtimes it starts ahead have been refilled (off the rate's clock), divided by the batch's runs; so it holds the kernel's workers (a network namespace's teardown, freed memory), the client's and the bench's own work, on every side alike. Apart, pmjail-serve's own process (HTTP, the supervision, Go's runtime, the clone's kernel work) from `/proc/PID/stat`. docs/performance.md (\"Throughput\") splits the daemon's.")
	return nil
}

func medianF(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func minF(v []float64) float64 { return slices.Min(v) }

func maxF(v []float64) float64 { return slices.Max(v) }
