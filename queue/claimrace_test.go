package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// Two clients, each on another node of a cluster (a direct get of a
// claim may be answered by a replica), submit at once, round after
// round, the same job under one id, then two jobs under one id: the
// same job is taken from both and stored once, and of two jobs one is
// taken and the other is ErrIDConflict.
func TestClaimRacesOnACluster(t *testing.T) {
	urls := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cfg := Config{URLs: urls, Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	if err := Provision(ctx, cfg, Layout{Replicas: 3, MaxJobs: 10000, MaxJobsPerTenant: 10000}); err != nil {
		t.Fatal(err)
	}
	var clients [2]*Client
	for i := range clients {
		c, err := Dial(ctx, Config{URLs: []string{urls[i]}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	const rounds = 40
	submitBoth := func(id string, jobs [2]*api.Job) [2]error {
		var errs [2]error
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() { errs[i] = c.Submit(ctx, "ci", id, jobs[i]) })
		}
		wg.Wait()
		return errs
	}
	for r := range rounds {
		job := &api.Job{Runtime: "deno", Source: fmt.Sprint("same ", r)}
		if errs := submitBoth(fmt.Sprint("same-", r), [2]*api.Job{job, job}); errs[0] != nil || errs[1] != nil {
			t.Errorf("round %d, the same job from two clients: %v", r, errs)
		}
		errs := submitBoth(fmt.Sprint("two-", r), [2]*api.Job{{Runtime: "deno", Source: "a"}, {Runtime: "deno", Source: "b"}})
		if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs[0], errs[1]), ErrIDConflict) {
			t.Errorf("round %d, two jobs under one id: %v", r, errs)
		}
	}
	s, err := clients[0].js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2*rounds {
		t.Errorf("the stream holds %d jobs, want %d", n, 2*rounds)
	}
}

// A job the stream refuses after its id was claimed (its tenant's
// backlog full) is taken when sent again once there is room: its claim
// is found and keys it as before.
func TestClaimOutlivesARefusedPublish(t *testing.T) {
	url := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Config{URLs: []string{url}, Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100, MaxJobsPerTenant: 2}); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 2 {
		if err := c.Submit(ctx, "ci", fmt.Sprint("fill-", i), &api.Job{Runtime: "deno", Source: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	job := &api.Job{Runtime: "deno", Source: "late"}
	if err := c.Submit(ctx, "ci", "late", job); err == nil {
		t.Fatal("a job past its tenant's backlog was taken")
	}
	s, err := c.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(cfg.Subject+".ci")); err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(ctx, "ci", "late", job); err != nil {
		t.Fatalf("the refused job sent again: %v", err)
	}
	if err := c.Submit(ctx, "ci", "late", job); err != nil {
		t.Fatalf("the refused job sent a third time: %v", err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("the stream after the job sent twice more: %+v %v", info, err)
	}
}
