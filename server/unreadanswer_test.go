package server

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// A client that leaves its sync runs' answers unread holds their run
// slots while each answer waits for it, not the daemon's memory: a
// run's slot went back as its run ended, before its answer (its output
// whole) was written, so one peer's runs whose answers it did not read
// each kept their output in the daemon for the answer's deadline while
// its slots ran the next: a peer's connections could hold as many
// answers as its slots could run in that minute.
func TestRunUnreadAnswersHoldTheirSlots(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "max_queue": 16, "others_max_queue": 16, "queue_timeout": "5s"}`)
	const n = 8
	const output = 4 << 20
	body, err := json.Marshal(&api.Job{Runtime: "deno", Source: fmt.Sprintf(`console.log("a".repeat(%d))`, output),
		Limits: api.Limits{Output: 2 * output}})
	if err != nil {
		t.Fatal(err)
	}
	base := heap()
	var conns []net.Conn
	for range n {
		c, err := net.Dial("unix", ts.sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "POST /v1/runs HTTP/1.1\r\nHost: pmjail\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			t.Fatal(err)
		}
	}
	// Every request settled: its run counted (before its answer is
	// written), or refused for want of a slot. The counters change with
	// no event a test can wait on.
	ran, refused := 0, 0
	for deadline := time.Now().Add(time.Minute); ran+refused < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs counted and %d refused of %d", ran, refused, n)
		}
		ran = int(counted(t, ts.metrics, "pmjail_runs_total", map[string]string{"status": "ok"}))
		refused = int(counted(t, ts.metrics, "pmjail_requests_rejected_total", map[string]string{"reason": codeQueueTimeout}))
	}
	grown := int64(heap()) - int64(base)
	t.Logf("%d runs answered and unread, %d refused: the heap grew %d KiB", ran, refused, grown>>10)
	const bound = 3 * output
	if grown > bound {
		t.Errorf("%d unread answers of runs of %d MiB of output: the heap grew %d MiB, want under %d MiB", ran, output>>20, grown>>20, bound>>20)
	}
	if h, err := ts.c.Health(t.Context()); err != nil || h.InFlight != ran {
		t.Errorf("health with %d answers unread: %+v %v, want each holding its slot", ran, h, err)
	}
	// A client gone gives its slot back, and the next run has it.
	for _, c := range conns {
		c.Close()
	}
	if res, err := ts.c.Run(t.Context(), &api.Job{Runtime: "deno", Source: `console.log("next")`}); err != nil || res.Status != api.StatusOK {
		t.Errorf("a run once the unread answers' clients are gone: %+v %v", res, err)
	}
}
