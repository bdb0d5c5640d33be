package queue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// setupWindow is setup with the stream's duplicate window set.
func setupWindow(t *testing.T, window time.Duration) (Config, *Client) {
	t.Helper()
	cfg, c := setup(t, 5*time.Second)
	if err := Provision(context.Background(), cfg, Layout{Replicas: 1, MaxJobs: 100, History: 5, Duplicates: window}); err != nil {
		t.Fatal(err)
	}
	return cfg, c
}

// checkFirst checks that tenant alice's id holds one stored result, the
// first job's, whose stdout is want.
func checkFirst(t *testing.T, c *Client, id, want string) {
	t.Helper()
	ctx := context.Background()
	got, err := c.Get(ctx, "alice", id)
	if err != nil || got.Stdout != want {
		t.Errorf("stored result %+v %v, want the first job's (%q)", got, err, want)
	}
	h, err := resultsKV(t, c).History(ctx, Key("alice", id))
	if err != nil || len(h) != 1 {
		t.Errorf("history of the key: %d entries (%v), want 1", len(h), err)
	}
}

// The same job sent twice under one id runs once, and both submits get
// its result.
func TestSameIDSameJobRunsOnce(t *testing.T) {
	cfg, c := setupWindow(t, time.Minute)
	e := &echo{hold: 200 * time.Millisecond}
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job := &api.Job{Runtime: "deno", Source: "one"}
	// The second submit comes while the first job runs or waits: the
	// stream's word is Duplicate with no result stored yet.
	for i := range 2 {
		if err := c.Submit(ctx, "alice", "twice", job); err != nil {
			t.Fatalf("submit %d: %v", i+1, err)
		}
	}
	res, err := c.SubmitWait(ctx, "alice", "twice", job)
	if err != nil || res.Stdout != "one" {
		t.Fatalf("third submit: %+v %v", res, err)
	}
	waitEmpty(t, c, cfg)
	if n := e.calls.Load(); n != 1 {
		t.Errorf("executor ran %d times, want 1", n)
	}
	checkFirst(t, c, "twice", "one")
}

// Another job under an id the stream holds within its duplicate window
// is ErrIDConflict at the submit, whether the first job is done or not.
func TestSameIDOtherJobWithinWindow(t *testing.T) {
	cfg, c := setupWindow(t, time.Minute)
	e := &echo{hold: 300 * time.Millisecond}
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.SubmitWait(ctx, "alice", "done", &api.Job{Runtime: "deno", Source: "one"})
	if err != nil || res.Stdout != "one" {
		t.Fatalf("first job: %+v %v", res, err)
	}
	err = c.Submit(ctx, "alice", "done", &api.Job{Runtime: "deno", Source: "two"})
	if !errors.Is(err, ErrIDConflict) {
		t.Fatalf("another job under a done id: %v, want ErrIDConflict", err)
	}
	// Not done yet: the submit learns which job the id holds from its
	// result.
	if err := c.Submit(ctx, "alice", "pending", &api.Job{Runtime: "deno", Source: "one"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.SubmitWait(ctx, "alice", "pending", &api.Job{Runtime: "deno", Source: "two"})
	if !errors.Is(err, ErrIDConflict) {
		t.Fatalf("another job under a pending id: %v, want ErrIDConflict", err)
	}
	waitEmpty(t, c, cfg)
	if n := e.calls.Load(); n != 2 {
		t.Errorf("executor ran %d times, want 2", n)
	}
	checkFirst(t, c, "done", "one")
	checkFirst(t, c, "pending", "one")
}

// After the duplicate window, another job under a done id reaches a
// worker, which refuses it: the stored result stays the first job's,
// the refusal goes out on the result subject, and SubmitWait says
// ErrIDConflict.
func TestSameIDOtherJobAfterWindow(t *testing.T) {
	const window = 200 * time.Millisecond
	cfg, c := setupWindow(t, window)
	e := &echo{}
	startWorker(t, cfg, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.SubmitWait(ctx, "alice", "late", &api.Job{Runtime: "deno", Source: "one"})
	if err != nil || res.Stdout != "one" {
		t.Fatalf("first job: %+v %v", res, err)
	}
	results, err := c.nc.SubscribeSync(cfg.ResultSubject + "." + Key("alice", "late"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = results.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Sent as Submit sends it, until the stream no longer drops it as a
	// duplicate: a dropped one is harmless.
	data, _ := json.Marshal(&api.Job{Runtime: "deno", Source: "two"})
	for {
		msg := &nats.Msg{Subject: cfg.Subject + ".alice", Header: nats.Header{HeaderID: []string{"late"}}, Data: data}
		ack, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(Key("alice", "late")))
		if err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate {
			break
		}
		time.Sleep(window / 4)
	}
	// The first job's result may be published after its store, which
	// SubmitWait saw: the refusal is the next one.
	var refusal *api.Result
	for refusal == nil || refusal.Status == api.StatusOK {
		m, err := results.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("no refusal on the result subject: %v", err)
		}
		if refusal, _, err = decode("late", m.Data); err != nil {
			t.Fatal(err)
		}
	}
	if refusal.Status != api.StatusRefused || refusal.Error == nil ||
		refusal.Error.Code != api.CodeIdempotencyConflict || refusal.ID != "late" {
		t.Fatalf("published refusal: %+v", refusal)
	}
	// Through the client: whether the stream drops it (within a new
	// window) or a worker refuses it, the answer is the conflict.
	if _, err := c.SubmitWait(ctx, "alice", "late", &api.Job{Runtime: "deno", Source: "three"}); !errors.Is(err, ErrIDConflict) {
		t.Fatalf("SubmitWait of another job after the window: %v, want ErrIDConflict", err)
	}
	// The first job again is acked unrun, or dropped.
	if _, err := c.SubmitWait(ctx, "alice", "late", &api.Job{Runtime: "deno", Source: "one"}); err != nil {
		t.Fatalf("the first job again: %v", err)
	}
	waitEmpty(t, c, cfg)
	if n := e.calls.Load(); n != 1 {
		t.Errorf("executor ran %d times, want 1", n)
	}
	checkFirst(t, c, "late", "one")
}

// `pmjail submit --nats --id` with another job under a done id fails
// with an error naming --id.
func TestSubmitRoleNamesTheID(t *testing.T) {
	cfg, c := setupWindow(t, time.Minute)
	startWorker(t, cfg, &echo{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.SubmitWait(ctx, "alice", "cli", &api.Job{Runtime: "deno", Source: "one"}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--urls", cfg.URLs[0], "--tenant", "alice", "--id", "cli"}
	for _, tc := range []struct {
		job  string
		code int
	}{{`{"runtime":"deno","source":"one"}`, 0}, {`{"runtime":"deno","source":"two"}`, 125}} {
		var out, errs strings.Builder
		code := SubmitMain(args, strings.NewReader(tc.job), &out, &errs)
		if code != tc.code {
			t.Fatalf("%s: exit %d (%s), want %d", tc.job, code, errs.String(), tc.code)
		}
		if code != 0 && !strings.Contains(errs.String(), "--id") {
			t.Errorf("%s: %q names no --id", tc.job, errs.String())
		}
		if code == 0 && !strings.Contains(out.String(), `"stdout":"one"`) {
			t.Errorf("%s: %q, want the first job's result", tc.job, out.String())
		}
	}
}
