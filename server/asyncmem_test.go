package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// resetPeak starts the process's peak resident size (VmHWM) over from
// its current size.
func resetPeak(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("the peak resident size cannot be reset here: %v", err)
	}
}

// residentKB returns the process's VmRSS and VmHWM, in KiB.
func residentKB(t *testing.T) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = n
		case "VmHWM:":
			peak = n
		}
	}
	return rss, peak
}

// TestAsyncRunOutputMemory: a guest → daemon attack through an async
// run, whose events the daemon holds while it runs and whose result it
// builds and stores whole at its end. Output of control characters took
// six bytes each in every such JSON copy: 8 MiB of them on stdout and on
// stderr cost the daemon ~1 GiB at the run's end. Carried in base64 once
// escaping would double it, the same output must stay within a bound
// well under that.
func TestAsyncRunOutputMemory(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "max_queue": 8, "others_max_queue": 8, "runs": {"dir": %q, "max_bytes": "1G"}}`, store), sock)
	ctx := context.Background()
	const output = 16 << 20 // both streams
	const bound = 24 * output
	heap()
	resetPeak(t)
	base, _ := residentKB(t)
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: `const s = "\x01".repeat(8 << 20); console.log(s); console.error(s);`, Limits: api.Limits{Output: 16 << 20}}, "")
	if err != nil {
		t.Fatal(err)
	}
	// The run's end, read as a client elsewhere would: its events stream
	// past, not decoded here.
	resp := followers(t, sock, r.ID, 1)[0]
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	_, peak := residentKB(t)
	grown := (peak - base) << 10
	t.Logf("%d bytes of events; resident %d MiB at the start, peak %d MiB", n, base>>10, peak>>10)
	if grown > bound {
		t.Errorf("an async run printing %d MiB of control characters: the daemon's peak grew %d MiB, want under %d MiB", output>>20, grown>>20, bound>>20)
	}
	run, err := ts.c.GetRun(ctx, r.ID)
	if err != nil || run.Result == nil || run.Result.Status != api.StatusOK || len(run.Result.Stdout) != 8<<20+1 || run.Result.Encoding.Stdout != api.EncodingBase64 {
		t.Fatalf("the run: %v, %+v", err, run)
	}
}

// TestAsyncRunTinyWritesMemory: a guest → daemon attack through an async
// run's events. The jail reads the guest's output as it comes, so a
// guest writing a byte at a time made an event of each, ~50 bytes of
// JSON for one byte of output, all held while the run lasts and stored
// at its end: 4 MiB of output written so took 46 MB of events and grew
// the daemon by ~280 MiB. Held back into chunks, the events are the
// output in base64 and little more, and the daemon's peak grows by a
// small multiple of the output.
func TestAsyncRunTinyWritesMemory(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "max_queue": 8, "others_max_queue": 8, "runs": {"dir": %q, "max_bytes": "1G"}}`, store), sock)
	ctx := context.Background()
	const output = 4 << 20
	heap()
	resetPeak(t)
	base, _ := residentKB(t)
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: fmt.Sprintf(`const b = new Uint8Array([1]); for (let i = 0; i < %d; i++) Deno.stdout.writeSync(b);`, output), Limits: api.Limits{Output: output}}, "")
	if err != nil {
		t.Fatal(err)
	}
	// The output's events, as a client reads them: all but the result.
	resp := followers(t, sock, r.ID, 1)[0]
	var n, events int
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if !bytes.HasPrefix(sc.Bytes(), []byte(`{"type":"result"`)) {
			n += len(sc.Bytes()) + 1
			events++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	_, peak := residentKB(t)
	grown := (peak - base) << 10
	t.Logf("%d events, %d bytes, for %d bytes written a byte at a time; resident %d MiB at the start, peak %d MiB", events, n, output, base>>10, peak>>10)
	run, err := ts.c.GetRun(ctx, r.ID)
	if err != nil || run.Result == nil || run.Result.Status != api.StatusOK || len(run.Result.Stdout) != output {
		t.Fatalf("the run: %v, %+v", err, run)
	}
	// The output's events are the output in base64 (4/3) and a few
	// dozen bytes for each chunk: at most twice the output.
	if n > 2*output {
		t.Errorf("%d bytes of events for %d bytes of output, want at most %d", n, output, 2*output)
	}
	// As much as a run printing its output in large writes grows it
	// (TestAsyncRunOutputMemory), with room for the store's start.
	if bound := int64(24*output + 32<<20); grown > bound {
		t.Errorf("the daemon's peak grew %d MiB for %d MiB of output, want under %d MiB", grown>>20, output>>20, bound>>20)
	}
}

// TestAsyncRunTrickledOutputEvents: the same attack spread over time. A
// guest writing a byte every few milliseconds for the whole of a long run
// made an event of each byte (or one each linger of 20 ms): ~50 bytes of
// events a byte of output, held while the run lasts, bounded by its wall
// clock rather than its output. The linger grows while the chunks it
// sends are small: a run trickling 400 bytes over ~3 s has a dozen
// events, not 100 or more.
func TestAsyncRunTrickledOutputEvents(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "max_queue": 8, "others_max_queue": 8, "runs": {"dir": %q}}`, store), sock)
	ctx := context.Background()
	const writes = 400
	r, err := ts.c.SubmitAsync(ctx, &api.Job{Runtime: "deno", Source: fmt.Sprintf(`const b = new Uint8Array([46]);
for (let i = 0; i < %d; i++) { Deno.stdout.writeSync(b); await new Promise((r) => setTimeout(r, 5)); }`, writes)}, "")
	if err != nil {
		t.Fatal(err)
	}
	var events int
	res, err := ts.c.RunEvents(ctx, r.ID, func(ev api.Event) {
		if ev.Type == api.EventStdout {
			events++
		}
	})
	if err != nil || res.Status != api.StatusOK || len(res.Stdout) != writes {
		t.Fatalf("the run: %v, %+v", err, res)
	}
	// The linger's ramp to a second (~1.3 s, 6 events), then one a second.
	most := 6 + int(res.Usage.WallMS/1000) + 2
	t.Logf("%d stdout events for %d writes over %d ms", events, writes, res.Usage.WallMS)
	if events > most {
		t.Errorf("%d stdout events for %d bytes trickled over %d ms, want at most %d", events, writes, res.Usage.WallMS, most)
	}
}
