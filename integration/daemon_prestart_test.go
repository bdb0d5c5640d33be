package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
)

// TestDaemonPrestartedRunIsContained: a run that takes an init stage the
// daemon started ahead of it is held by its own job's cgroup and layers,
// like any run. The memory bomb allocates outside V8's heap, so only the
// job's cgroup can stop it: a pooled init stage that failed to join that
// cgroup (v1), or was not born in it (v2), would let it run to the
// wall-clock limit. The cgroup is the one the init stage waited with,
// made ahead, whose limits the run wrote. Warm runtimes are off: a run
// they serve takes no init stage, and each holds a cgroup of its own.
func TestDaemonPrestartedRunIsContained(t *testing.T) {
	d := startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 1, "max_queue": 2, "socket": {"mode": "0660"}, "warm": {"deno": 0}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The first run tells the pool which namespaces to start children in;
	// it fills once that run's own set-up is done.
	res, err := d.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log("first")`})
	if err != nil || res.Status != jail.StatusOK {
		t.Fatalf("first run: %v %+v", err, res)
	}
	// The daemon starts init stages ahead only while a core is spare: on
	// one CPU (the TCG VM) never, and the run below is a cold one,
	// contained alike.
	ahead := runtime.NumCPU() > 1
	if ahead {
		waitPrestarted(t, d)
		if m, err := d.c.Metrics(ctx); err != nil || !strings.Contains(m, "pmjail_init_stages_prestarted 1") {
			t.Errorf("metrics (%v) lack pmjail_init_stages_prestarted 1", err)
		}
		if held := reservedCgroups(d.pid()); len(held) != 1 {
			t.Errorf("the waiting init stage holds cgroups %v, want one", held)
		}
	} else {
		// The pool decides whether to refill inside the run, before its
		// answer is written: nothing can start after it.
		if h, err := d.c.Health(ctx); err != nil || h.Pooled != 0 {
			t.Fatalf("one CPU: health %+v (%v), want no init stage started ahead", h, err)
		}
	}

	res, err = d.c.Run(ctx, &api.Job{Runtime: "deno",
		Source: `console.log("started"); const a = []; for (;;) a.push(new Uint8Array(1 << 20).fill(7));`,
		Limits: api.Limits{Memory: 64 << 20, Timeout: api.Duration(20 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Warm {
		t.Fatalf("run %s served warm with warm runtimes off", res.ID)
	}
	if res.Status != jail.StatusMemoryLimit || !strings.Contains(res.Stdout, "started") {
		t.Fatalf("status %s stdout %q error %+v, want memory_limit after the guest started", res.Status, res.Stdout, res.Error)
	}
	if res.Usage.PeakMemoryBytes > 64<<20+memMargin {
		t.Errorf("peak memory %d, want <= 64 MiB + 8 MiB", res.Usage.PeakMemoryBytes)
	}
	if got := ranPrestarted(d, res.ID); got != ahead {
		t.Fatalf("run %s took a prestarted init stage: %v, want %v; daemon log:\n%s", res.ID, got, ahead, d.logs)
	}
	// Its root is the first run's (a Deno root with the same /tmp), which
	// the init stage mounted while it waited.
	if got := finishedWith(d, res.ID, `"root_prepared":true`); got != ahead {
		t.Errorf("run %s took the root mounted ahead: %v, want %v; daemon log:\n%s", res.ID, got, ahead, d.logs)
	}
	raw, err := json.Marshal(res.Posture)
	if err != nil {
		t.Fatal(err)
	}
	p := decodePosture(t, raw)
	for _, l := range append(coreLayers, "cgroup_memory", "cgroup_pids", "user_namespace", "pid_namespace") {
		if st := p.state(l); st != "applied" {
			t.Errorf("layer %s is %q in the prestarted run's posture, want applied", l, st)
		}
	}
	if len(p.Cgroup.Paths) == 0 {
		t.Fatalf("the run's posture names no cgroup: %s", raw)
	}
	for ctl, dir := range p.Cgroup.Paths {
		if reserved := cgroup.Reserved(filepath.Base(dir)); reserved != ahead {
			t.Errorf("the run's %q cgroup %s was made ahead: %v, want %v", ctl, dir, reserved, ahead)
		}
	}
}

// waitPrestarted waits until the daemon has an init stage started ahead.
func waitPrestarted(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := d.c.Health(context.Background())
		if err == nil && h.Pooled > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no prestarted init stage within 10s (health %+v, %v)", h, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ranPrestarted reports whether the daemon logged run id as one that took
// a prestarted init stage. The log comes through a pipe: the line may
// follow the answer by a moment.
func ranPrestarted(d *daemon, id string) bool {
	return finishedWith(d, id, `"prestarted":true`)
}

// finishedWith reports whether the daemon's "run finished" line for job id
// holds field, waiting a little for the line.
func finishedWith(d *daemon, id, field string) bool {
	for range 250 {
		for _, line := range strings.Split(d.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"run finished"`) && strings.Contains(line, `"job":"`+id+`"`) {
				return strings.Contains(line, field)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
