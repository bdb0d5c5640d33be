package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pmjail/pmjail/job"
)

// warmDaemonConfig keeps two warm Deno runtimes per profile (issue 37):
// a request's runtime has started, in its whole jail, before it arrives.
const warmDaemonConfig = `{"version": 1, "max_concurrency": 4, "max_queue": 64, "log_level": "warn", "warm": {"deno": 2}}`

// awaitWarm waits, off the clock, until n warm Deno runtimes wait again.
func (d *Daemon) awaitWarm(ctx context.Context, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := d.Client.Health(ctx)
		if err != nil {
			return err
		}
		if h.Warm != nil && h.Warm.Idle["deno"] >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d warm deno runtimes wait, not %d, 10s after a run", h.Warm.Idle["deno"], n)
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
	var tw, tb []time.Duration
	for i := range b.Reps + 2 {
		if err := d.awaitWarm(ctx, 2); err != nil {
			return err
		}
		w, err := warm.Once(ctx)
		if err != nil {
			return err
		}
		c, err := bare.Once(ctx)
		if err != nil {
			return err
		}
		if i >= 2 { // the first two warm up the page cache
			tw, tb = append(tw, w), append(tb, c)
		}
	}
	mw, mb := median(tw), median(tb)
	ratio := float64(mw) / float64(mb)
	if err := d.awaitWarm(ctx, 2); err != nil {
		return err
	}
	h, err := d.Client.Health(ctx)
	if err != nil {
		return err
	}
	perRuntime := "n/a"
	if n := h.Warm.Idle["deno"]; n > 0 {
		perRuntime = fmt.Sprintf("%.1f MiB", float64(h.Warm.MemoryBytes)/float64(n)/(1<<20))
	}
	b.Report.Table([]string{"what", "median", "vs bare cold deno run"}, [][]string{
		{"Deno hello request→result, daemon with warm runtimes", ms(mw), fmt.Sprintf("%.2f×", ratio)},
		{"bare cold `deno run hello.js`", ms(mb), "1×"},
		{"memory per idle warm Deno runtime (its cgroup)", perRuntime, ""},
	})
	b.Report.Target("Deno hello through the daemon, warm, ≤ 0.25× bare cold deno run", fmt.Sprintf("%.2f×", ratio), ratio <= 0.25)
	b.Report.Skip("Python hello through the daemon, warm, ≤ 0.03× bare cold Pyodide", "not built: Python runs are not served warm yet")
	b.Report.Para("%d rounds, the two sides in turns, each warm request sent with two warm runtimes waiting (refilled off the clock). Daemon config `%s`; the request is `{\"runtime\":\"deno\",\"source\":\"console.log(\\\"hello\\\")\"}` with the Go client. The bare side runs `DENO_DIR=$(mktemp -d) deno run hello.js`.", b.Reps, warmDaemonConfig)
	return nil
}
