package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// The fields a client reads about its run: the times, the queue wait, its
// labels echoed, and the posture in the amount it asked for.
func TestResultFieldsForClients(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1}`)
	ctx := context.Background()

	// A run that holds the one slot until the second is queued behind it.
	started := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		var once bool
		_, err := ts.c.Stream(ctx, &api.Job{Runtime: "deno", Source: `console.log("in"); await new Promise(r => setTimeout(r, 400))`},
			func(ev api.Event) {
				if ev.Type == api.EventStdout && !once {
					once = true
					close(started)
				}
			})
		first <- err
	}()
	<-started
	sent := time.Now()
	labels := map[string]string{"tenant": "acme", "request_id": "r-1"}
	res, err := ts.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log(1)`, Labels: labels, Posture: api.PostureSummary})
	answered := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if res.Status != api.StatusOK {
		t.Fatalf("status %s %+v", res.Status, res.Error)
	}
	if res.QueuedMS <= 0 || res.QueuedMS > answered.Sub(sent).Milliseconds() {
		t.Errorf("queued_ms %d, want above 0 (queued behind the first run) and at most %v", res.QueuedMS, answered.Sub(sent))
	}
	if res.StartedAt.Before(sent.Add(-time.Millisecond)) || res.FinishedAt.Before(res.StartedAt.Time) ||
		res.FinishedAt.After(answered.Add(time.Millisecond)) {
		t.Errorf("started_at %v, finished_at %v: not within the request (%v to %v)", res.StartedAt, res.FinishedAt, sent, answered)
	}
	if len(res.Labels) != 2 || res.Labels["tenant"] != "acme" || res.Labels["request_id"] != "r-1" {
		t.Errorf("labels %v, want %v echoed", res.Labels, labels)
	}
	p := res.Posture
	if p == nil || p.Decision != "run" || len(p.Layers) != 0 || p.Observed != nil || p.Cgroup != nil || !p.Applied("mount_namespace") {
		t.Errorf("summary posture %+v", p)
	}

	// The default is the full posture, and no labels. A warm run is
	// answered before its jail's teardown and holds the one slot until
	// that ends: the next run is sent once it is free, so as not to queue.
	for deadline := time.Now().Add(10 * time.Second); ; {
		h, err := ts.c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot still taken 10s after the run's answer: %+v", h)
		}
		time.Sleep(time.Millisecond)
	}
	res, err = ts.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log(1)`})
	if err != nil {
		t.Fatal(err)
	}
	if res.Posture == nil || len(res.Posture.Layers) == 0 || res.Posture.Observed == nil || res.Labels != nil || res.QueuedMS != 0 {
		t.Errorf("default: posture %+v, labels %v, queued_ms %d", res.Posture, res.Labels, res.QueuedMS)
	}

	// Bad labels are refused with the field named.
	for body, field := range map[string]string{
		`{"runtime":"deno","source":"1","labels":{"Tenant":"x"}}`:                                           "labels",
		`{"runtime":"deno","source":"1","labels":{"t":"` + strings.Repeat("v", api.LabelValueMax+1) + `"}}`: "labels.t",
		`{"runtime":"deno","source":"1","posture":"some"}`:                                                  "posture",
	} {
		status, eb, _ := ts.post(t, strings.NewReader(body))
		if status != 400 || eb.Error.Code != api.CodeInvalidJob || eb.Error.Field != field {
			b, _ := json.Marshal(eb)
			t.Errorf("%.60s: %d %s, want 400 invalid_job on %s", body, status, b, field)
		}
	}
}
