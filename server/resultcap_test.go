package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/ipc"
)

// forgeJS writes a frame of the guest's own, as a guest may (the channel's
// FIFO is in its root); the runtime's own frames never come.
const forgeJS = `const forge = (text) => { const b = new TextEncoder().encode(text); const f = new Uint8Array(4 + b.length); new DataView(f.buffer).setUint32(0, b.length); f.set(b, 4); const o = Deno.openSync("/pmjail/channel/out", { write: true }); for (let off = 0; off < f.length;) off += o.writeSync(f.subarray(off)); };
`

// TestRunResultWithinTheFrameCap: a guest → daemon attack through its
// result. A done or error frame holds <, > and & unescaped, one byte
// each, and every copy of the result takes six (\u003c): within the
// 4 MiB frame cap a guest's value of them made a sync run's response
// 25 MB, and eight such runs at once grew the daemon by 1.1 GiB. The
// cap holds on the value and the error as the result holds them,
// whether the runtime's bootstrap sent them or the guest forged its own
// frame; a value that fits as JSON is kept.
func TestRunResultWithinTheFrameCap(t *testing.T) {
	sock, store := asyncDirs(t)
	startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 8, "runs": {"dir": %q}}`, store), sock)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	const limit = ipc.DefaultMaxFrame
	fill := fmt.Sprintf(`"<".repeat(%d)`, limit-64)
	for _, tc := range []struct {
		name, src, message string
		runs               int
	}{
		{"returned", `export default () => ` + fill + `;`, "the returned value is", 8},
		{"forged done frame", forgeJS + `export default () => { forge('{"type":"done","value":"' + ` + fill + ` + '"}'); Deno.exit(0); };`, "pmjail: the returned value is", 8},
		{"forged error frame", forgeJS + `export default () => { forge('{"type":"error","error":{"name":"E","message":"' + ` + fill + ` + '"}}'); Deno.exit(1); };`, "pmjail: the error the guest reported is", 8},
		{"fits", fmt.Sprintf(`export default () => "<".repeat(%d);`, (limit-64)/6), "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := json.Marshal(&api.Job{Runtime: "deno", Source: tc.src})
			if err != nil {
				t.Fatal(err)
			}
			heap()
			resetPeak(t)
			base, _ := residentKB(t)
			var wg sync.WaitGroup
			results := make([][]byte, tc.runs)
			for i := range tc.runs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := hc.Post("http://pmjail/v1/runs", "application/json", bytes.NewReader(body))
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					results[i], _ = io.ReadAll(resp.Body)
				}()
			}
			wg.Wait()
			_, peak := residentKB(t)
			grown := (peak - base) << 10
			t.Logf("%d runs: responses of %d bytes; the daemon's peak grew %d MiB", tc.runs, len(results[0]), grown>>20)
			for _, b := range results {
				var res api.Result
				if err := json.Unmarshal(b, &res); err != nil {
					t.Fatalf("response of %d bytes: %v", len(b), err)
				}
				if len(b) > limit+16<<10 {
					t.Errorf("a response of %d bytes, over the %d-byte frame cap", len(b), limit)
				}
				switch {
				case tc.message == "":
					if res.Status != api.StatusOK || len(res.Value) < (limit-64)/6 {
						t.Errorf("a value that fits: status %s, %d bytes of value, error %+v", res.Status, len(res.Value), res.Error)
					}
				case res.Error == nil:
					t.Errorf("status %s, no error; want a ResultError saying %q", res.Status, tc.message)
				case res.Error.Code != "ResultError" || !strings.HasPrefix(res.Error.Message, tc.message):
					t.Errorf("status %s, error %s %.80q; want a ResultError saying %q", res.Status, res.Error.Code, res.Error.Message, tc.message)
				}
			}
			// Eight runs' results of 4 MiB, some copies of each, and the
			// runs themselves: 1.1 GiB before.
			if bound := int64(256 << 20); grown > bound {
				t.Errorf("%d runs grew the daemon's peak by %d MiB, want under %d MiB", tc.runs, grown>>20, bound>>20)
			}
		})
	}
}
