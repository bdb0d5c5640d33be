package integration

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// TestDaemonWarmAnswerHoldsSlot: a warm run is answered before its jail's
// teardown, and its slot is given back only after that teardown: whenever
// the daemon says no run is in flight, the answered run's runtime is gone.
// The job touches 64 MiB, which its teardown frees, so that the answer
// usually comes while the slot is still held (logged, not required: the
// machine's load decides).
func TestDaemonWarmAnswerHoldsSlot(t *testing.T) {
	d := startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 1, "max_queue": 4, "socket": {"mode": "0660"}, "prestart": -1, "warm": {"deno": 1}}`)
	job := &api.Job{Runtime: "deno", Source: `const a = new Uint8Array(64 << 20).fill(1); console.log(a[7])`}
	held := 0
	for i := 0; i < 8; i++ {
		res := warmRun(t, d, job)
		if res.Status != api.StatusOK || res.Stdout != "1\n" {
			t.Fatalf("status %s, stdout %q, stderr %q", res.Status, res.Stdout, res.Stderr)
		}
		if res.Posture == nil || res.Posture.Observed == nil || res.Posture.Observed.PID <= 0 {
			t.Fatalf("no runtime pid in the result's posture: %+v", res.Posture)
		}
		h, err := d.c.Health(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// Read after the health: a runtime there now was there then.
		err = syscall.Kill(res.Posture.Observed.PID, 0)
		alive := !errors.Is(err, syscall.ESRCH)
		switch {
		case h.InFlight == 0 && alive:
			t.Fatalf("run %d: the slot is free while its runtime (pid %d) is still there", i, res.Posture.Observed.PID)
		case h.InFlight > 0:
			held++
		}
	}
	t.Logf("the slot still held at the answer's health check in %d of 8 runs", held)
}

// TestDaemonWarmNextRunWaitsForTeardown: with one slot and no queue, a
// client's runs one after the other all run: the next, sent as soon as
// the last was answered (its slot held for its teardown), waits for that
// slot instead of being refused for it.
func TestDaemonWarmNextRunWaitsForTeardown(t *testing.T) {
	d := startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 1, "max_queue": -1, "socket": {"mode": "0660"}, "prestart": -1, "warm": {"deno": 1}}`)
	job := &api.Job{Runtime: "deno", Source: `const a = new Uint8Array(64 << 20).fill(1); console.log(a[7])`}
	warmRun(t, d, job) // the template learnt
	warm := 0
	for i := 0; i < 8; i++ {
		res, err := d.c.Run(context.Background(), job)
		if err != nil {
			t.Fatalf("run %d, sent once the last was answered: %v", i, err)
		}
		if res.Status != api.StatusOK || res.Stdout != "1\n" {
			t.Fatalf("run %d: status %s, stdout %q, stderr %q", i, res.Status, res.Stdout, res.Stderr)
		}
		if res.Warm {
			warm++
		}
	}
	if warm == 0 {
		t.Fatalf("no run was served warm: nothing was answered before its teardown")
	}
	t.Logf("%d of 8 runs warm", warm)
}
