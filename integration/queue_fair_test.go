package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/queue"
)

// TestQueueNATSFairPulls: a tenant whose backlog outruns its rate, or
// its share, holds up no other tenant's jobs. Tenant slow submits a
// backlog of jobs first, tenant fast a few after: fast's jobs are all
// done while most of slow's still wait, and every job of slow is done in
// the end, once, on its first delivery (none sent back to wait, which
// would spend its max_deliver of 2).
func TestQueueNATSFairPulls(t *testing.T) {
	for _, tc := range []struct {
		name     string
		slow     string // slow's share and rate
		slowJobs int
		source   string // slow's job, of its id
	}{
		// At 1/s, slow's jobs take 9s or more.
		{"rate", `"max_concurrency": 1, "max_queue": 4, "rate": "1/s"`, 10, `console.log(%q)`},
		// One at a time, slow's jobs of 700ms each take 4s or more.
		{"share", `"max_concurrency": 1, "max_queue": 4`, 6, `await new Promise((r) => setTimeout(r, 700)); console.log(%q)`},
	} {
		t.Run(tc.name, func(t *testing.T) { testFairPulls(t, tc.slow, tc.slowJobs, tc.source) })
	}
}

func testFairPulls(t *testing.T, slow string, slowJobs int, slowSource string) {
	const fastJobs = 3
	before := snapshotHost(t)
	node := startNATSNode(t)
	cfg := queue.Config{URLs: []string{node.url}}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		err := queue.Provision(tctx, cfg, queue.Layout{Replicas: 1, MaxJobs: 1000, Retention: time.Hour, History: 5})
		tcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("provision: %v\n%s", err, tail(node.logs.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	workerCfg := fmt.Sprintf(`{"version": 1, "max_concurrency": 2, "max_queue": 4, "others": "refuse",
		"tenants": [
			{"name": "slow", "match": {"uid": 65534}, %s},
			{"name": "fast", "match": {"uid": 65533}, "max_concurrency": 1, "max_queue": 4}
		],
		"queue": {"nats": {"urls": [%q], "ack_wait": "3s", "max_deliver": 2, "concurrency": 2}}}`, slow, node.url)
	w := startDaemon(t, daemonDir(t), workerCfg)

	c, err := queue.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	js, _, watch := watchResults(ctx, t, node.url, cfg.Bucket, jetstream.UpdatesOnly())

	submit := func(tenant string, n int, source string) {
		for i := range n {
			id := fmt.Sprintf("%s-%02d", tenant, i)
			if err := c.Submit(ctx, tenant, id, &api.Job{Runtime: "deno", Source: fmt.Sprintf(source, id)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	started := time.Now()
	submit("slow", slowJobs, slowSource)
	submit("fast", fastJobs, `console.log(%q)`)

	seen := map[string]int{}
	done := map[string]int{}
	slowAtFast := -1
	for done["slow"] < slowJobs || done["fast"] < fastJobs {
		select {
		case <-ctx.Done():
			t.Fatalf("results after %v: %v\n%s", time.Since(started), done, tail(w.logs.String(), 4000))
		case e := <-watch.Updates():
			if e == nil {
				continue
			}
			seen[e.Key()]++
			tenant, _, _ := strings.Cut(e.Key(), ".")
			done[tenant]++
			t.Logf("%v: %s", time.Since(started).Round(time.Millisecond), e.Key())
			if tenant == "fast" && done["fast"] == fastJobs {
				slowAtFast = done["slow"]
			}
		}
	}
	// Fast's three, on the slot slow cannot use, take a few runs' time.
	if slowAtFast > slowJobs/2 {
		t.Errorf("fast's %d jobs were done only after %d of slow's %d: slow's backlog held them up", fastJobs, slowAtFast, slowJobs)
	}
	for tenant, n := range map[string]int{"slow": slowJobs, "fast": fastJobs} {
		for i := range n {
			id := fmt.Sprintf("%s-%02d", tenant, i)
			key := queue.Key(tenant, id)
			if seen[key] != 1 {
				t.Errorf("%s: stored %d times", key, seen[key])
			}
			res, err := c.Get(ctx, tenant, id)
			if err != nil || res.Status != api.StatusOK || res.Stdout != id+"\n" {
				t.Errorf("%s: %+v %v", key, res, err)
			}
		}
	}
	// No job was sent back to wait: each was done on its first delivery.
	for _, line := range strings.Split(w.logs.String(), "\n") {
		if strings.Contains(line, `"queue: job sent back"`) || strings.Contains(line, `"queue: job done"`) && !strings.Contains(line, `"delivered":1,`) {
			t.Errorf("a job was delivered more than once: %s", line)
		}
	}
	stream, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := stream.Info(ctx)
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("stream not empty: %+v %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.stop(t)
	assertNothingLeft(t, before)
	if t.Failed() {
		t.Logf("worker log:\n%s", tail(w.logs.String(), 6000))
	}
}
