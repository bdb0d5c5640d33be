package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/profiles"
)

// TestDaemonPrestartedRunIsContained: a run that takes an init stage the
// daemon started ahead of it is held by its own job's cgroup and layers,
// like any run. The memory bomb allocates outside V8's heap, so only the
// job's cgroup can stop it: a pooled init stage that failed to join that
// cgroup would let it run to the wall-clock limit.
func TestDaemonPrestartedRunIsContained(t *testing.T) {
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 1, 2, "0660"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The first run tells the pool which namespaces to start children in;
	// it fills once that run's own set-up is done.
	res, err := d.c.Run(ctx, &job.Request{Runtime: "deno", Source: `console.log("first")`})
	if err != nil || res.Status != jail.StatusOK {
		t.Fatalf("first run: %v %+v", err, res)
	}
	if hostCgroupMechanic(t) == "v2" {
		// An init stage starts in its job's cgroup there (CLONE_INTO_CGROUP):
		// moving one in later waits for an RCU grace period, so none is
		// started ahead, nor after the run (a refill would only wait, unused).
		time.Sleep(time.Second)
		if h, err := d.c.Health(ctx); err != nil || h.Prestarted != 0 || ranPrestarted(d, res.ID) {
			t.Fatalf("cgroup v2: health %+v (%v), want no prestarted init stage", h, err)
		}
		return
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: the daemon starts init stages ahead only while a core is spare")
	}
	waitPrestarted(t, d)
	if m, err := d.c.Metrics(ctx); err != nil || !strings.Contains(m, "pmjail_init_stages_prestarted 1") {
		t.Errorf("metrics (%v) lack pmjail_init_stages_prestarted 1", err)
	}

	res, err = d.c.Run(ctx, &job.Request{Runtime: "deno",
		Source: `console.log("started"); const a = []; for (;;) a.push(new Uint8Array(1 << 20).fill(7));`,
		Limits: profiles.Limits{Memory: 64 << 20, Timeout: profiles.Duration(20 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jail.StatusMemoryLimit || !strings.Contains(res.Stdout, "started") {
		t.Fatalf("status %s stdout %q error %+v, want memory_limit after the guest started", res.Status, res.Stdout, res.Error)
	}
	if res.Usage.PeakMemoryBytes > 64<<20+memMargin {
		t.Errorf("peak memory %d, want <= 64 MiB + 8 MiB", res.Usage.PeakMemoryBytes)
	}
	if !ranPrestarted(d, res.ID) {
		t.Fatalf("run %s did not take a prestarted init stage; daemon log:\n%s", res.ID, d.logs)
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
}

// waitPrestarted waits until the daemon has an init stage started ahead.
func waitPrestarted(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := d.c.Health(context.Background())
		if err == nil && h.Prestarted > 0 {
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
	for range 250 {
		for _, line := range strings.Split(d.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"run finished"`) && strings.Contains(line, `"job":"`+id+`"`) {
				return strings.Contains(line, `"prestarted":true`)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
