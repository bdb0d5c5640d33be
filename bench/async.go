package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/pmjail/pmjail/api"
)

// asyncThroughput: jobs per second of the Deno hello as async runs
// (submit, then follow the events to the result) and as one batch,
// against sync runs through the same daemon, at the same concurrency.
// What it shows is the async path's own cost: the store's writes, the
// 202 and the second request per run.
func (b *Bench) asyncThroughput(ctx context.Context) error {
	b.Report.Section("Async runs")
	cfg := fmt.Sprintf(`{"version": 1, "max_concurrency": 4, "max_queue": 64, "others_max_queue": 64, "log_level": "warn", "runs": {"dir": %q, "max_batch": 64}}`, b.work("async-state"))
	d, err := startDaemon(ctx, b, "daemon-async", cfg)
	if err != nil {
		b.Report.Para("skipped: %v", err)
		return nil
	}
	defer d.Stop()
	hello, err := helloJob().API()
	if err != nil {
		return err
	}
	async := func(ctx context.Context) error {
		run, err := d.Client.SubmitAsync(ctx, hello, "")
		if err != nil {
			return err
		}
		res, err := d.Client.RunEvents(ctx, run.ID, nil)
		if err != nil {
			return err
		}
		if res.Status != api.StatusOK || res.Stdout != "1\n" {
			return fmt.Errorf("async run: status %s, stdout %q", res.Status, res.Stdout)
		}
		return nil
	}
	sides := []func(context.Context) error{d.Hello, async}
	const rounds = 3
	var rows [][]string
	for _, c := range []int{1, 2} {
		n := 32 * c
		rates, err := inTurns(ctx, rounds, n, c, sides)
		if err != nil {
			return err
		}
		sm, am := medianF(rates[0]), medianF(rates[1])
		rows = append(rows, []string{fmt.Sprint(c), fmt.Sprint(n), fmt.Sprintf("%.1f/s", sm), fmt.Sprintf("%.1f/s", am), fmt.Sprintf("%.2f", am/sm)})
	}
	// A batch of 32, followed to the last result.
	var batchRates []float64
	jobs := make([]api.Job, 32)
	for i := range jobs {
		jobs[i] = *hello
	}
	for r := 0; r < rounds; r++ {
		rate, err := batch(ctx, 1, 1, func(ctx context.Context) error {
			runs, err := d.Client.SubmitBatch(ctx, jobs)
			if err != nil {
				return err
			}
			for _, run := range runs.Runs {
				if res, err := d.Client.RunEvents(ctx, run.ID, nil); err != nil || res.Status != api.StatusOK {
					return fmt.Errorf("batch run %s: %+v %v", run.ID, res, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		batchRates = append(batchRates, rate*float64(len(jobs)))
	}
	rows = append(rows, []string{"batch", fmt.Sprint(len(jobs)), "", fmt.Sprintf("%.1f/s", medianF(batchRates)), ""})
	b.Report.Table([]string{"concurrency", "runs per batch", "sync (median)", "async (median)", "async / sync"}, rows)
	b.Report.Para("%d batches per side, sync and async taking turns, through one daemon under `%s`. A sync run is one `POST /v1/runs`; an async one is `POST /v1/runs` with `Prefer: respond-async`, then `GET /v1/runs/{id}/events` to the result (its record written to the bbolt store, an fsync each, at submission and at the end). The batch row submits 32 jobs in one `POST /v1/batches` and follows each to its result. This machine has %d cores.", rounds, cfg, runtime.NumCPU())
	return nil
}
