package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/job"
)

// TestBatchDecodeBounded is TestBodyReadsBounded's attack past the
// read: a batch's body was read in a body slot, then the slot given
// back and the body decoded into one raw value per job before their
// number was checked. A body of the largest size holding "1,1,1,..."
// is 1.8 million jobs: 253 MiB allocated and 100 MiB held for half a
// second each, outside every bound, so that one peer's connections
// (256 of one uid by default) sent at once took GiBs of the daemon's
// memory. The jobs are counted before any is kept, and a batch's body
// is decoded within its slot, as a run's is.
func TestBatchDecodeBounded(t *testing.T) {
	sock, store := asyncDirs(t)
	startServerAt(t, `{"version": 1, "max_concurrency": 1, "prestart": -1, "warm": {"deno": 0}, "runs": {"dir": "`+store+`"}}`, sock)
	n := (job.MaxRequestBytes - 64) / 2
	body := `{"jobs": [` + strings.Repeat("1,", n-1) + `1]}`
	const conns = 8
	heap()
	resetPeak(t)
	base, _ := residentKB(t)
	statuses := make([]int, conns)
	fields := make([]string, conns)
	var wg sync.WaitGroup
	raw := fmt.Sprintf("POST /v1/batches HTTP/1.1\r\nHost: pmjail\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for i := range conns {
		wg.Go(func() {
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			// A refusal before the body is read closes the connection
			// under the write: its answer is read all the same.
			_, _ = io.WriteString(c, raw)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("a batch: no answer: %v", err)
				return
			}
			defer resp.Body.Close()
			var eb api.ErrorBody
			_ = json.NewDecoder(resp.Body).Decode(&eb)
			statuses[i], fields[i] = resp.StatusCode, eb.Error.Field
		})
	}
	wg.Wait()
	_, peak := residentKB(t)
	grown := (peak - base) << 10
	t.Logf("%d batches of %d jobs (%d KiB) at once: answered %v; resident %d MiB at the start, peak %d MiB", conns, n, len(body)>>10, statuses, base>>10, peak>>10)
	if grown > 128<<20 {
		t.Errorf("%d batches of %d KiB at once grew the daemon's peak by %d MiB, want it bounded", conns, len(body)>>10, grown>>20)
	}
	for i, status := range statuses {
		if status != http.StatusBadRequest && status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
			t.Errorf("a batch of %d jobs: %d %q, want 400 naming jobs, or busy", n, status, fields[i])
		}
		if status == http.StatusBadRequest && fields[i] != "jobs" {
			t.Errorf("a batch of %d jobs: 400 naming %q, want jobs", n, fields[i])
		}
	}
}
