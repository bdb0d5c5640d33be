package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/queue"
)

// queueJobs is the number of jobs of one batch through the queue.
const queueJobs = 60

// queueThroughput measures hello jobs per second through a JetStream
// work-queue stream with 1, 2 and 3 pmjail workers, against the same
// jobs through one daemon's socket at the same concurrency as a worker.
func (b *Bench) queueThroughput(ctx context.Context) error {
	b.Report.Section("Queue throughput (NATS JetStream)")
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: b.work("nats"), NoSigs: true, NoLog: true})
	if err != nil {
		return fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("nats server not ready within 10s")
	}
	cfg := queue.Config{URLs: []string{ns.ClientURL()}}
	if err := cfg.Check(1); err != nil {
		return err
	}
	if err := queue.Provision(ctx, cfg, queue.Layout{Replicas: 1, MaxJobs: 10000, Retention: time.Hour}); err != nil {
		return err
	}
	c, err := queue.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	const perWorker = 2
	workerConfig := fmt.Sprintf(`{"version": 1, "max_concurrency": %d, "queue": {"nats": {"urls": [%q], "concurrency": %d}}}`, perWorker, ns.ClientURL(), perWorker)

	const rounds = 3
	round := 0
	viaQueue := func(ctx context.Context) (float64, error) {
		round++
		start := time.Now()
		for i := range queueJobs {
			id := fmt.Sprintf("r%d-%d", round, i)
			if err := c.Submit(ctx, "others", id, &api.Job{Runtime: "deno", Source: "console.log(1)"}); err != nil {
				return 0, err
			}
		}
		for i := range queueJobs {
			id := fmt.Sprintf("r%d-%d", round, i)
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			res, err := c.Wait(wctx, "others", id)
			cancel()
			if err != nil {
				return 0, err
			}
			if res.Status != api.StatusOK || res.Stdout != "1\n" {
				return 0, fmt.Errorf("job %s: status %s, stdout %q, error %+v", id, res.Status, res.Stdout, res.Error)
			}
		}
		return float64(queueJobs) / time.Since(start).Seconds(), nil
	}

	var rows [][]string
	for workers := 1; workers <= 3; workers++ {
		// The same jobs through one daemon's socket, as many at once as
		// the workers take from the queue together; the two sides take
		// turns, which goes first alternating.
		conc := workers * perWorker
		ds, err := startDaemons(ctx, b, workers, workerConfig, conc)
		if err != nil {
			return err
		}
		sd := ds[len(ds)-1]
		var rates, srates []float64
		sides := []func() error{
			func() error { r, err := viaQueue(ctx); rates = append(rates, r); return err },
			func() error { r, err := batch(ctx, queueJobs, conc, sd.Hello); srates = append(srates, r); return err },
		}
		for r := range rounds {
			for k := range sides {
				if err := sides[(k+r)%2](); err != nil {
					stopAll(ds)
					return err
				}
			}
		}
		stopAll(ds)
		sm, m := medianF(srates), medianF(rates)
		rows = append(rows, []string{fmt.Sprint(workers), fmt.Sprint(conc),
			fmt.Sprintf("%.1f/s (%.1f – %.1f)", m, minF(rates), maxF(rates)),
			fmt.Sprintf("%.1f/s (%.1f – %.1f)", sm, minF(srates), maxF(srates)), fmt.Sprintf("%.2f×", m/sm)})
	}
	b.Report.Table([]string{"workers", "runs at once", "through JetStream, jobs/s (median, min – max)", "through one daemon's socket", "queue / socket"}, rows)
	b.Report.Para("%d rounds of %d Deno hello jobs (`console.log(1)`) per row. Through the queue: all %d published to the work-queue stream of a one-node JetStream server in the bench's process (file storage, one replica), then every result waited for in the bucket (package queue's Client, as `pmjail submit --nats`); each worker is a `pmjail serve` under `%s`. Through the socket: the same job with the Go client, as many at once as the workers run together, to one daemon whose max_concurrency is that many, running beside the workers (it idles through the queue's rounds, the workers through its); the two sides take turns, which goes first alternating. This machine has %d cores: more workers add no cores, so the rows show what the queue costs, not what more hosts gain (docs/queue.md).",
		rounds, queueJobs, queueJobs, workerConfig, runtime.NumCPU())
	return nil
}

// startDaemons starts n queue workers under config and, last, a socket
// daemon of max_concurrency conc.
func startDaemons(ctx context.Context, b *Bench, n int, config string, conc int) ([]*Daemon, error) {
	var ds []*Daemon
	for i := range n + 1 {
		name, cfg := fmt.Sprintf("queue-w%d-%d", n, i), config
		if i == n {
			name, cfg = fmt.Sprintf("queue-socket-%d", conc), fmt.Sprintf(`{"version": 1, "max_concurrency": %d}`, conc)
		}
		d, err := startDaemon(ctx, b, name, cfg)
		if err != nil {
			stopAll(ds)
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func stopAll(ds []*Daemon) {
	for _, d := range ds {
		d.Stop()
	}
}
