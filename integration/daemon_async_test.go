package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/clienttest"
)

// An async run outlives its daemon: SIGKILL the daemon with one run done
// and one running; the next daemon has the first's result, reports the
// other cancelled because the daemon restarted, and sweeps what the dead
// one left. Over the real binary and socket, through the CLI.
func TestDaemonAsyncRestart(t *testing.T) {
	before := snapshotHost(t)
	dir := daemonDir(t)
	cfg := fmt.Sprintf(`{"version": 1, "max_concurrency": 2, "socket": {"mode": "0660"}, "runs": {"dir": %q}}`, filepath.Join(dir, "state"))
	d := startDaemon(t, dir, cfg)
	ctx := context.Background()

	script := filepath.Join(dir, "kept.js")
	writeFile(t, script, `console.log("kept"); console.error("note")`)
	inv := pmjailCmd(t, "", "submit", "--socket", d.sock, "--async", script)
	var done api.Run
	if err := json.Unmarshal([]byte(inv.Stdout), &done); inv.ExitCode != 0 || err != nil || done.ID == "" || done.Status != api.RunQueued {
		t.Fatalf("submit --async: exit %d %q %q (%v)", inv.ExitCode, inv.Stdout, inv.Stderr, err)
	}
	if inv := pmjailCmd(t, "", "runs", "events", "--socket", d.sock, done.ID); inv.ExitCode != 0 || inv.Stdout != "kept\n" || inv.Stderr != "note\n" {
		t.Fatalf("runs events: exit %d %q %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}

	long, err := d.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `console.log("started"); for (;;) {}`}, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-clienttest.Started(ctx, d.c, long.ID):
	case <-time.After(60 * time.Second):
		t.Fatalf("the long run never started: %s", d.logs)
	}
	dead := d.pid()
	d.kill()

	d2 := startDaemon(t, dir, cfg)
	if n := jobCgroups(dead); len(n) > 0 {
		t.Errorf("the new daemon did not sweep the dead one's cgroups %v", n)
	}
	inv = pmjailCmd(t, "", "runs", "get", "--socket", d2.sock, done.ID)
	var got api.Run
	if err := json.Unmarshal([]byte(inv.Stdout), &got); err != nil || got.Status != api.RunDone || got.Result == nil || got.Result.Stdout != "kept\n" {
		t.Errorf("the finished run after the restart: exit %d %q %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	lost, err := d2.c.GetRun(ctx, long.ID)
	if err != nil || lost.Status != api.RunCancelled || lost.Result == nil || lost.Result.Status != api.StatusCancelled ||
		lost.Result.Error == nil || !strings.Contains(lost.Result.Error.Message, "daemon restarted") {
		t.Errorf("the run lost mid-flight: %+v %v", lost, err)
	}
	if inv := pmjailCmd(t, "", "runs", "events", "--socket", d2.sock, long.ID); inv.ExitCode != 125 || !strings.Contains(inv.Stderr, "daemon restarted") {
		t.Errorf("runs events of the lost run: exit %d %q %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	if inv := pmjailCmd(t, "", "runs", "get", "--socket", d2.sock, "0000000000000000"); inv.ExitCode != 125 || !strings.Contains(inv.Stderr, "404") {
		t.Errorf("runs get of no run: exit %d %q", inv.ExitCode, inv.Stderr)
	}
	m, err := d2.c.Metrics(ctx)
	if err != nil || !strings.Contains(m, `pmjail_async_runs_total{event="lost"} 1`) {
		t.Errorf("metrics after the restart lack the lost run: %v", err)
	}
	d2.stop(t)
	assertNothingLeft(t, before)
}
