package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/ipc"
)

// TestRunLogsHeldAsBudgeted: a guest → daemon attack through its logs. The
// run's log budget (1 MiB) counted a log's raw bytes, while the result
// holds it as JSON, where a control character, <, > or & takes six bytes
// (\u003c), in the message as in the meta: a guest logging them made the
// daemon hold, send and store ~6 MiB of result and ~12 MiB of events for
// its 1 MiB, sync or async. Counted as the result holds them, the logs
// take the budget and their entries' few bytes each, wherever they go.
func TestRunLogsHeldAsBudgeted(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q, "max_bytes": "1G"}}`, store), sock)
	ctx := context.Background()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	// The bytes of a body, read as a client reads them.
	size := func(resp *http.Response, err error) int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d, %v", resp.Request.URL, resp.StatusCode, err)
		}
		return n
	}
	// The budget, and ~40 bytes of JSON for each of its entries.
	const bound = ipc.DefaultMaxLogBytes + ipc.DefaultMaxLogs*64 + 16<<10
	for _, tc := range []struct{ name, src string }{
		{"message of <", `const m = "<".repeat(8000); let n = 0; while ((await ctx.host.log.info(m)).ok) n++; return n;`},
		{"message of control characters", `const m = "\x01".repeat(8000); let n = 0; while ((await ctx.host.log.info(m, 1)).ok) n++; return n;`},
		{"meta of &", `const m = "&".repeat(8000); let n = 0; while ((await ctx.host.log.info("", m)).ok) n++; return n;`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &api.Job{Runtime: "deno", Source: "export default async (input, ctx) => { " + tc.src + " };", Capabilities: api.Capabilities{Log: true}}
			body, err := json.Marshal(job)
			if err != nil {
				t.Fatal(err)
			}
			sync := size(hc.Post("http://pmjail/v1/runs", "application/json", bytes.NewReader(body)))
			r, err := ts.c.SubmitAsync(ctx, job, "")
			if err != nil {
				t.Fatal(err)
			}
			events := size(hc.Get("http://pmjail/v1/runs/" + r.ID + "/events"))
			stored := size(hc.Get("http://pmjail/v1/runs/" + r.ID))
			run, err := ts.c.GetRun(ctx, r.ID)
			if err != nil || run.Result == nil || run.Result.Status != api.StatusOK || !run.Result.Truncated.Logs {
				t.Fatalf("the run: %v, %+v", err, run)
			}
			t.Logf("%s logs: a sync response of %d bytes, events of %d, a stored result of %d", run.Result.Value, sync, events, stored)
			if sync > bound || stored > bound || events > 2*bound {
				t.Errorf("a run's 1 MiB of logs took a response of %d KiB, events of %d KiB and a stored result of %d KiB; want at most %d KiB each (twice that for the events, which carry each log and the result)",
					sync>>10, events>>10, stored>>10, bound>>10)
			}
		})
	}
}
