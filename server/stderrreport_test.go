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
)

// TestRunForgedStderrReportBounded: a guest → daemon attack through its
// stderr. The result takes Deno's report of an unsettled top-level await
// (or of a failed type check) out of stderr as its error's stack and
// message; stderr is the guest's to write, so a guest that printed the
// report's first line and 8 MiB of < after it, then exited 1, had that
// copied into the error, where each < takes six bytes: a 61 MB response
// (its stderr alone crosses in base64, 11 MB) and 310 MiB of the daemon's
// peak for one run. The report and message taken are bounded.
func TestRunForgedStderrReportBounded(t *testing.T) {
	sock, store := asyncDirs(t)
	startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	const fill = 8 << 20
	write := fmt.Sprintf(`const b = new TextEncoder().encode(head + "<".repeat(%d) + tail); for (let o = 0; o < b.length;) o += Deno.stderr.writeSync(b.subarray(o)); Deno.exit(1);`, fill)
	for _, tc := range []struct {
		name, src, code string
		typecheck       bool
	}{
		{"unsettled await", `const head = "error: Top-level await promise never resolved\n    at file:///job/main.ts:1:1 "; const tail = "\n";` + write, "UnsettledPromise", false},
		{"type check", `const head = "TS1 [ERROR]: "; const tail = "\n    at file:///job/main.ts:1:1\nerror: Type checking failed.\n";` + write, "TypeError", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := json.Marshal(&api.Job{Runtime: "deno", Files: map[string]string{"main.ts": tc.src}, TypeCheck: tc.typecheck, Limits: api.Limits{Output: 16 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			heap()
			resetPeak(t)
			base, _ := residentKB(t)
			resp, err := hc.Post("http://pmjail/v1/runs", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			_, peak := residentKB(t)
			var res api.Result
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatalf("response of %d bytes: %v", len(b), err)
			}
			if res.Error == nil || res.Error.Code != tc.code || len(res.Stderr) < fill {
				t.Fatalf("status %s, error %+.200v, %d bytes of stderr; want %s read from the stderr", res.Status, res.Error, len(res.Stderr), tc.code)
			}
			grown := (peak - base) << 10
			t.Logf("a response of %d bytes, %d of them the error's; the daemon's peak grew %d MiB", len(b), len(res.Error.Message)+len(res.Error.Stack), grown>>20)
			// The stderr in base64 and some room for the rest.
			if bound := len(res.Stderr)*4/3 + 1<<20; len(b) > bound {
				t.Errorf("a response of %d bytes for %d of stderr, want at most %d", len(b), len(res.Stderr), bound)
			}
		})
	}
}
