package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pmjail/pmjail/job"
)

// warmDaemonConfig keeps two warm Deno runtimes per profile (issue 37):
// a request's runtime has started, in its whole jail, before it arrives.
const warmDaemonConfig = `{"version": 1, "max_concurrency": 4, "max_queue": 64, "log_level": "warn", "warm": {"deno": 2, "python": 1}}`

// warmTurns times warm and bare in turns, rounds times after skip
// rounds not kept, each warm request sent once n warm runtimes of rt wait
// (awaitWarmOf, off the clock): the two medians.
func (d *Daemon) warmTurns(ctx context.Context, warm, bare Variant, rt string, n int, limit time.Duration, rounds, skip int) (time.Duration, time.Duration, error) {
	var tw, tb []time.Duration
	for i := range rounds + skip {
		if err := d.awaitWarmOf(ctx, rt, n, limit); err != nil {
			return 0, 0, err
		}
		w, err := warm.Once(ctx)
		if err != nil {
			return 0, 0, err
		}
		c, err := bare.Once(ctx)
		if err != nil {
			return 0, 0, err
		}
		if i >= skip {
			tw, tb = append(tw, w), append(tb, c)
		}
	}
	return median(tw), median(tb), nil
}

// idleMemory is the memory of one idle warm runtime of rt (its cgroup's),
// read once n of them wait (awaitWarmOf); "n/a" when none does.
func (d *Daemon) idleMemory(ctx context.Context, rt string, n int, limit time.Duration) (string, error) {
	if err := d.awaitWarmOf(ctx, rt, n, limit); err != nil {
		return "", err
	}
	h, err := d.Client.Health(ctx)
	if err != nil {
		return "", err
	}
	if idle := h.Warm.Idle[rt]; idle > 0 {
		return fmt.Sprintf("%.1f MiB", float64(h.Warm.Memory[rt])/float64(idle)/(1<<20)), nil
	}
	return "n/a", nil
}

// awaitWarmOf waits until n warm runtimes of rt wait, for up to limit.
func (d *Daemon) awaitWarmOf(ctx context.Context, rt string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		h, err := d.Client.Health(ctx)
		if err != nil {
			return err
		}
		if h.Warm != nil && h.Warm.Idle[rt] >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d warm %s runtimes wait, not %d, %s after a run", h.Warm.Idle[rt], rt, n, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// warmHello: a Deno hello request→result through a daemon with warm
// runtimes against a bare cold `deno run`, in turns; and what each idle
// warm runtime holds.
func (b *Bench) warmHello(ctx context.Context) error {
	b.Report.Section("Warm runtimes (daemon)")
	d, err := startDaemon(ctx, b, "daemon-warm", warmDaemonConfig)
	if err != nil {
		b.Report.Para("skipped: %v", err)
		return nil
	}
	defer d.Stop()
	req := &job.Request{Runtime: "deno", Source: `console.log("hello")`}
	warm := Variant{Name: "daemon, warm", Call: func(ctx context.Context) error {
		wire, err := req.API()
		if err != nil {
			return err
		}
		res, err := d.Client.Run(ctx, wire)
		if err != nil {
			return err
		}
		if res.Status != "ok" || res.Stdout != "hello\n" || !res.Warm {
			return fmt.Errorf("warm run: status %s, warm %v (%s), stdout %q", res.Status, res.Warm, res.WarmReason, res.Stdout)
		}
		return nil
	}}
	bare := Variant{Name: "bare", Argv: []string{b.Deno, "run", "hello.js"}, Dir: b.Work, FreshDenoDir: true, Want: "hello"}
	// The first two rounds warm up the page cache.
	mw, mb, err := d.warmTurns(ctx, warm, bare, "deno", 2, 10*time.Second, b.Reps, 2)
	if err != nil {
		return err
	}
	ratio := float64(mw) / float64(mb)
	perRuntime, err := d.idleMemory(ctx, "deno", 2, 10*time.Second)
	if err != nil {
		return err
	}
	b.Report.Table([]string{"what", "median", "vs bare cold deno run"}, [][]string{
		{"Deno hello request→result, daemon with warm runtimes", ms(mw), fmt.Sprintf("%.2f×", ratio)},
		{"bare cold `deno run hello.js`", ms(mb), "1×"},
		{"memory per idle warm Deno runtime (its cgroup)", perRuntime, ""},
	})
	b.Report.Target("Deno hello through the daemon, warm, ≤ 0.25× bare cold deno run", fmt.Sprintf("%.2f×", ratio), ratio <= 0.25)
	b.Report.Para("%d rounds, the two sides in turns, each warm request sent with two warm runtimes waiting (refilled off the clock). Daemon config `%s`; the request is `{\"runtime\":\"deno\",\"source\":\"console.log(\\\"hello\\\")\"}` with the Go client. The bare side runs `DENO_DIR=$(mktemp -d) deno run hello.js`.", b.Reps, warmDaemonConfig)
	return b.warmPython(ctx, d)
}

// warmPython: a Python hello request→result through the daemon with a
// warm Pyodide runtime against bare cold Pyodide, in turns.
func (b *Bench) warmPython(ctx context.Context, d *Daemon) error {
	req := &job.Request{Runtime: "python", Source: "print('hello')"}
	one := func(ctx context.Context) (bool, string, error) {
		wire, err := req.API()
		if err != nil {
			return false, "", err
		}
		res, err := d.Client.Run(ctx, wire)
		if err != nil {
			return false, "", err
		}
		if res.Status != "ok" || res.Stdout != "hello\n" {
			return false, "", fmt.Errorf("python run: status %s, stdout %q, %+v", res.Status, res.Stdout, res.Error)
		}
		return res.Warm, res.WarmReason, nil
	}
	// The template's first run goes cold (and builds what is missing).
	for i := 0; ; i++ {
		warm, why, err := one(ctx)
		if err != nil {
			return err
		}
		if warm {
			break
		}
		if i == 3 {
			return fmt.Errorf("no python run served warm after 4: %s", why)
		}
		if err := d.awaitWarmOf(ctx, "python", 1, time.Minute); err != nil {
			return err
		}
	}
	warm := Variant{Name: "daemon, warm python", Call: func(ctx context.Context) error {
		w, why, err := one(ctx)
		if err == nil && !w {
			err = fmt.Errorf("python run not served warm: %s", why)
		}
		return err
	}}
	bare := Variant{Name: "bare Pyodide (cold DENO_DIR)", Argv: []string{b.Deno, "run", "--allow-read=" + b.PyodideDir, "pyodide-hello.mjs"}, Dir: b.Work, FreshDenoDir: true, Want: "hello"}
	mw, mb, err := d.warmTurns(ctx, warm, bare, "python", 1, time.Minute, b.PyReps, 0)
	if err != nil {
		return err
	}
	ratio := float64(mw) / float64(mb)
	perRuntime, err := d.idleMemory(ctx, "python", 1, time.Minute)
	if err != nil {
		return err
	}
	b.Report.Table([]string{"what", "median", "vs bare cold Pyodide"}, [][]string{
		{"Python hello request→result, daemon with a warm runtime", ms(mw), fmt.Sprintf("%.3f×", ratio)},
		{"bare cold Pyodide (`loadPyodide`, `runPython`)", ms(mb), "1×"},
		{"memory per idle warm Pyodide runtime (its cgroup)", perRuntime, ""},
	})
	b.Report.Target("Python hello through the daemon, warm, ≤ 0.03× bare cold Pyodide", fmt.Sprintf("%.3f×", ratio), ratio <= 0.03)
	b.Report.Para("%d rounds, the two sides in turns, each warm request sent with a warm Pyodide waiting (refilled off the clock, loaded from the snapshot).", b.PyReps)
	return nil
}
