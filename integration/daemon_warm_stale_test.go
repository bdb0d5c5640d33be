package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDaemonWarmDropsRuntimesOfRemovedFiles: `pmjail prepare` after an
// upgrade removes the caches a daemon's runs copy in (Prune keeps only the
// new key's). The daemon's next runs are jails without them: a template
// of a new key, learnt by the first run, which goes cold. The old
// template's runtime, which no run can take, waited for warm_max_age
// (10 minutes) beside the new one's; it is ended at once.
func TestDaemonWarmDropsRuntimesOfRemovedFiles(t *testing.T) {
	// The daemon's own state directory: a copy (links) of the one the
	// binary uses, whose caches the test removes.
	src := os.Getenv("PMJAIL_STATE_DIR")
	if src == "" {
		src = filepath.Join(filepath.Dir(filepath.Dir(pmjail)), ".cache", "pmjail")
	}
	caches, _ := filepath.Glob(filepath.Join(src, "deno-guest-cache-*"))
	if len(caches) == 0 {
		t.Fatalf("no guest cache in %s: run `pmjail prepare` first", src)
	}
	state := filepath.Join(daemonDir(t), "state")
	if out, err := exec.Command("cp", "-al", src, state).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v %s", src, err, out)
	}
	t.Setenv("PMJAIL_STATE_DIR", state)
	d := startDaemon(t, daemonDir(t), strings.Replace(warmConfig, `"deno": 2`, `"deno": 1`, 1))
	warmRun(t, d, hello())
	awaitWarm(t, d)

	// What prepare's prune does to the caches of a key no longer built.
	caches, _ = filepath.Glob(filepath.Join(state, "deno-guest-cache-*"))
	for _, c := range caches {
		if err := os.RemoveAll(c); err != nil {
			t.Fatal(err)
		}
	}
	res, err := d.c.Run(context.Background(), hello())
	if err != nil {
		t.Fatal(err)
	}
	if res.Warm || !strings.HasPrefix(res.WarmReason, "the first run of its profile and options") {
		t.Fatalf("the first run without the caches: warm %v, %q; want a template of its own learnt", res.Warm, res.WarmReason)
	}
	// The new template fills to its one runtime; the old one's is gone.
	awaitWarm(t, d)
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := d.c.Health(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held := reservedCgroups(d.pid())
		if h.Warm.Idle["deno"] == 1 && len(held) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the caches went, %d deno runtimes wait and %d cgroups are held (%v), want the new template's one\n%s",
				h.Warm.Idle["deno"], len(held), held, d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res = warmRun(t, d, hello())
	if res.Stdout != "1\n" {
		t.Errorf("a warm run of the new template: %+v", res)
	}
}
