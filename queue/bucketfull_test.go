package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// One tenant's results do not shut the result bucket to the others':
// once full, the bucket drops its oldest results to store new ones. It
// refused every new one instead, so that a tenant whose results filled it
// (at its rate: under 9 minutes of the shipped config's 600 a minute of 1 MiB
// outputs fill its 5 GiB) had every other tenant's job run, its result
// refused, sent back, run again at each delivery and never given a
// result, for as long as the bucket kept the tenant's (its ttl, 7 days).
func TestOneTenantCannotFillTheResultBucket(t *testing.T) {
	url := startNATS(t)
	cfg := Config{URLs: []string{url}, AckWait: api.Duration(5 * time.Second), Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const room, result = 64 << 10, 8 << 10
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100, MaxResultBytes: room}); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := &echo{}
	startWorker(t, cfg, e)
	// Hog's results, twice what the bucket holds.
	var first string
	for i := range 2 * room / result {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := c.Run(rctx, "hog", &api.Job{Runtime: "deno", Source: strings.Repeat("h", result)})
		rcancel()
		if err != nil {
			t.Logf("hog's job %d, after %d KiB of its results: %v", i, i*result>>10, err)
			break
		}
		if i == 0 {
			first = res.ID
		}
	}
	ran := e.calls.Load()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	bobs := strings.Repeat("b", result)
	res, err := c.Run(rctx, "bob", &api.Job{Runtime: "deno", Source: bobs})
	rcancel()
	if err != nil || res.Stdout != bobs {
		t.Errorf("bob's job of a result as large as hog's once hog's filled the bucket: %v", err)
	}
	if n := e.calls.Load() - ran; n != 1 {
		t.Errorf("bob's job ran %d times, want once", n)
	}
	if _, err := c.Get(ctx, "hog", first); !errors.Is(err, ErrNoResult) {
		t.Errorf("hog's first result, in a bucket of %d bytes that took %d KiB since: %v, want it dropped", room, 2*room>>10, err)
	}

	// A worker on a bucket that refuses a result once full says so.
	logs := workerWarns(t, c, cfg, bucketStream(cfg.Bucket), func(sc *jetstream.StreamConfig) { sc.Discard = jetstream.DiscardNew })
	if !strings.Contains(logs, "result bucket refuses a result once full") {
		t.Errorf("a worker on a bucket that refuses results once full said nothing of it: %s", logs)
	}
}
