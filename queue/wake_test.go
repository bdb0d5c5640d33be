package queue

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// countInfos counts the stream-info requests sent to the config's stream
// from now on: the JetStream API's requests are subjects of the account
// like any other, seen by a subscriber on them.
func countInfos(t *testing.T, cfg Config) *atomic.Int64 {
	t.Helper()
	nc, err := nats.Connect(cfg.URLs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int64
	if _, err := nc.Subscribe("$JS.API.STREAM.INFO."+cfg.Stream, func(*nats.Msg) { n.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// An idle worker costs the stream's leader nothing, and sees a job at
// once: the stream republishes a notice of each job (Provision), and the
// worker wakes on it, rather than looking every so often. The numbers
// (idle stream-info requests per second, the time from a job's submit
// to its result on an idle worker) are docs/queue.md's.
func TestWorkerWakesOnAJob(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	infos := countInfos(t, cfg)
	e := &echo{}
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A first job: the tenant's consumer is made.
	if res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "first"}); err != nil || res.Stdout != "first" {
		t.Fatalf("first job: %+v %v", res, err)
	}
	// Idle for 4s.
	before := infos.Load()
	idle := 4 * time.Second
	time.Sleep(idle)
	perSec := float64(infos.Load()-before) / idle.Seconds()
	// An idle worker's pickup: the job submitted at a different point of
	// any period the worker might have.
	var lat []time.Duration
	for i := range 20 {
		time.Sleep(time.Duration(50+i*61%300) * time.Millisecond)
		t0 := time.Now()
		res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "x"})
		if err != nil || res.Stdout != "x" {
			t.Fatalf("job %d: %+v %v", i, res, err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	t.Logf("idle worker: %.2f stream-info requests/s; submit to result: median %v, max %v",
		perSec, lat[len(lat)/2].Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond))
	if perSec > 0.5 {
		t.Errorf("an idle worker sent %.2f stream-info requests a second, want at most 0.5", perSec)
	}
	if lat[len(lat)/2] > 50*time.Millisecond {
		t.Errorf("median pickup of an idle worker %v, want under 50ms", lat[len(lat)/2])
	}
}

// A job whose publisher set a Nats-Subject header of its own (another
// tenant's subject) is noticed as its own subject's: the stream appends
// its header after the job's.
func TestWorkerNoticesTheStoredSubject(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	e := &echo{}
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tn := range []string{"alice", "bob"} {
		if res, err := c.Run(ctx, tn, &api.Job{Runtime: "deno", Source: tn}); err != nil || res.Stdout != tn {
			t.Fatalf("%s's first job: %+v %v", tn, res, err)
		}
	}
	// bob's lane was just made by a look at the stream: the next is 5s
	// away, and only the notice brings the job sooner.
	t0 := time.Now()
	msg := &nats.Msg{Subject: cfg.Subject + ".alice", Header: nats.Header{HeaderID: []string{"forged"}, "Nats-Subject": []string{cfg.Subject + ".bob"}},
		Data: []byte(`{"runtime":"deno","source":"forged"}`)}
	if _, err := c.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, "alice", "forged")
	if err != nil || res.Stdout != "forged" {
		t.Fatalf("the job: %+v %v", res, err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("a job noticed under a forged subject took %v, want under 1s", d)
	}
}

// The notices are taken from a republish whose source covers every
// job's subject, whatever its destination's mapping; others are none.
func TestNoticeSubscription(t *testing.T) {
	for _, tc := range []struct {
		src, dest, want string
	}{
		{"pmjail.jobs.*", "pmjail.jobs-notice.{{wildcard(1)}}", "pmjail.jobs-notice.*"},
		{"", "notes.>", "notes.>"},
		{">", "all.>", "all.>"},
		{"pmjail.>", "n.{{wildcard(1)}}.x", "n.*.x"},
		{"*.jobs.*", "n", "n"},
		{"pmjail.jobs.alice", "n", ""},
		{"pmjail.jobs", "n", ""},
		{"pmjail.jobs.*.x", "n", ""},
		{"other.*", "n", ""},
		{"pmjail.jobs.*", "", ""},
	} {
		var rp *jetstream.RePublish
		if tc.dest != "" || tc.src != "" {
			rp = &jetstream.RePublish{Source: tc.src, Destination: tc.dest}
		}
		if got := noticeSubscription(rp, "pmjail.jobs"); got != tc.want {
			t.Errorf("republish %q -> %q: %q, want %q", tc.src, tc.dest, got, tc.want)
		}
	}
	if got := noticeSubscription(nil, "pmjail.jobs"); got != "" {
		t.Errorf("no republish: %q", got)
	}
}
