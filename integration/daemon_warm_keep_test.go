package integration

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// TestDaemonWarmRefusedJobKeepsRuntime: a job whose limits the waiting
// runtime already exceeds (here a tasks bound below the runtime's own
// threads) runs cold, and the runtime it was offered, untouched, stays
// for the next job. One tenant's stream of such jobs used to discard an
// idle runtime each, so that the others' runs went cold while the daemon
// spent its CPU starting replacements.
func TestDaemonWarmRefusedJobKeepsRuntime(t *testing.T) {
	d := startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 2, "max_queue": 4, "socket": {"mode": "0660"}, "prestart": -1, "warm": {"deno": 1}}`)
	warmRun(t, d, hello()) // the default template is known and refilling
	awaitWarm(t, d)
	// With no init stages kept (prestart -1), the reserved cgroups are
	// the waiting runtimes'.
	waiting := reservedCgroups(d.pid())
	res, err := d.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: "console.log(1)", Limits: api.Limits{Pids: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// A runtime is idle only once Deno has started, its threads with it:
	// the task check always sees them.
	if res.Warm || !strings.Contains(res.WarmReason, "tasks") {
		t.Fatalf("warm %v, reason %q: want cold, for its tasks", res.Warm, res.WarmReason)
	}
	if after := reservedCgroups(d.pid()); len(waiting) == 0 || !slices.Contains(after, waiting[0]) {
		t.Fatalf("the runtime the refused job was offered (cgroup %v) is gone: %v waiting after it", waiting, after)
	}
}
