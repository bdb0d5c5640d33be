package runtimes

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pmjail/pmjail/ipc"
	"golang.org/x/sys/unix"
)

// channelTraceScript times a log call's steps inside the guest, with the
// real channel.js against the real broker: the whole call as a round
// trip (a meta makes it one) and as a note (within the host's credit),
// the encoding of a call's frame, the decoding of a reply's, and first,
// as a run's script would, 900 log calls from a fresh start (V8's code is
// cold). It prints nanoseconds per call as JSON.
const channelTraceScript = `
import { Channel, makeHost } from %q;
const [dir, n] = [Deno.args[0], Number(Deno.args[1])];
const ch = new Channel(dir + "/in", dir + "/out");
await ch.started;
const host = makeHost(ch, null);
const per = (t, k = n) => Math.round((performance.now() - t) * 1e6 / k);
// First, as a run's script would: 900 log calls from a fresh start.
let t = performance.now();
for (let i = 0; i < 900; i++) await host.log.info("x");
const cold = per(t, 900);
for (let i = 0; i < 500; i++) await host.log.info("warm", {});
t = performance.now();
for (let i = 0; i < n; i++) await host.log.info("x", {});
const call = per(t);
for (let i = 0; i < 500; i++) await host.log.info("warm");
t = performance.now();
for (let i = 0; i < n; i++) await host.log.info("x");
const note = per(t);
const scratch = new Uint8Array(4096);
const enc = new TextEncoder();
t = performance.now();
for (let i = 0; i < n; i++) {
  const { written } = enc.encodeInto(JSON.stringify({ type: "call", id: i + 1, method: "log.info", params: { message: "x", meta: {} } }), scratch.subarray(4));
  new DataView(scratch.buffer).setUint32(0, written);
}
const encode = per(t);
const reply = enc.encode(JSON.stringify({ type: "reply", id: 12345, ok: true, value: null, credit: { calls: 999, logs: 999, bytes: 1048575, message: 8192, frame: 4194304 } }));
let sink = 0;
t = performance.now();
for (let i = 0; i < n; i++) sink += JSON.parse(String.fromCharCode.apply(null, reply)).id;
const decode = per(t);
console.log(JSON.stringify({ call, note, cold, encode, decode, sink: sink > 0 }));
await ch.finish({ type: "done", value: null });
`

// timedEnds is fifoEnds that notes when each read returned and each
// write began: the host's share of a call is the time from the read that
// brought its frame to the write of its reply.
type timedEnds struct {
	fifoEnds
	mu        sync.Mutex
	readAt    time.Time
	firstRead time.Time
	spans     []time.Duration
}

func (c *timedEnds) Read(p []byte) (int, error) {
	n, err := c.fifoEnds.Read(p)
	c.mu.Lock()
	c.readAt = time.Now()
	if c.firstRead.IsZero() {
		c.firstRead = c.readAt
	}
	c.mu.Unlock()
	return n, err
}

func (c *timedEnds) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.readAt.IsZero() {
		c.spans = append(c.spans, time.Since(c.readAt))
		c.readAt = time.Time{}
	}
	c.mu.Unlock()
	return c.fifoEnds.Write(p)
}

// BenchmarkChannelCall traces one log call through the real channel.js
// under Deno and ipc.Serve over two FIFOs (b.N calls of each kind): ns/op
// is a round trip as the guest sees it; the metrics are a call sent as a
// note, the guest's encoding and decoding, and the host's share (median,
// from the read that returned the frame to the reply's write).
func BenchmarkChannelCall(b *testing.B) {
	in := testInstall(b, b.TempDir())
	dir := b.TempDir()
	ends := hostFIFOs(b, dir)
	ceil := ipc.PermissiveCeiling()
	ceil.MaxLogs = 1 << 30
	ceil.MaxCalls = 1 << 30
	ceil.MaxLogBytes = 1 << 40
	ceil.MaxGuestBytes = 1 << 50 // every frame counts at least 512 bytes
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := &timedEnds{fifoEnds: fifoEnds{r: ends["out"], w: ends["in"]}}
	served := make(chan ipc.Outcome, 1)
	go func() {
		served <- ipc.Serve(ctx, conn, ipc.SessionConfig{Capabilities: ipc.Capabilities{Log: true}, Ceiling: ceil})
	}()
	n := max(b.N, 1000)
	cmd := channelScript(ctx, b, in, channelTraceScript, dir, fmt.Sprint(n))
	b.ResetTimer()
	out, err := cmd.CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("guest script: %v\n%.500s", err, out)
	}
	var got struct{ Call, Note, Cold, Encode, Decode float64 }
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &got); err != nil {
		b.Fatalf("guest printed %q: %v", out, err)
	}
	if o := <-served; !o.Done || o.ProtocolError != nil {
		b.Fatalf("session: done %v, protocol error %v", o.Done, o.ProtocolError)
	}
	conn.mu.Lock()
	spans := slices.Clone(conn.spans)
	conn.mu.Unlock()
	slices.Sort(spans)
	b.ReportMetric(got.Call, "ns/op")
	b.ReportMetric(got.Note, "note-ns/call")
	b.ReportMetric(got.Cold, "cold-note-ns/call")
	b.ReportMetric(got.Encode, "encode-ns/call")
	b.ReportMetric(got.Decode, "decode-ns/call")
	if len(spans) > 0 {
		b.ReportMetric(float64(spans[len(spans)/2]), "host-ns/call")
		b.ReportMetric(float64(spans[len(spans)*9/10]), "host-p90-ns/call")
	}
}

// channelInputScript takes the start frame, then makes one log call: the
// host times from the start frame's write to that call's arrival.
const channelInputScript = `
import { Channel } from %q;
const dir = Deno.args[0];
const ch = new Channel(dir + "/in", dir + "/out");
const start = await ch.started;
await ch.call("log.info", { message: String(start.input.s.length) });
await ch.finish({ type: "done", value: null });
`

// BenchmarkChannelStartFrame: a megabyte of input from the guest's
// start to its first call (it read and parsed the frame), with the
// incoming FIFO at a pipe's default 64 KiB and at the jail's 1 MiB
// (jail.growPipe). "started" writes the frame as a run does, as the
// runtime starts: the larger pipe takes it all while Deno starts.
// "waiting" writes it once the guest waits in its read: then the small
// pipe's hand-offs overlap the guest's reading with the host's writing
// and it was the quicker. ns/op is the median of b.N runs.
func BenchmarkChannelStartFrame(b *testing.B) {
	in := testInstall(b, b.TempDir())
	input := json.RawMessage(`{"s":"` + strings.Repeat("a", 1_000_000-8) + `"}`)
	for _, c := range []struct {
		size    int
		waiting bool
	}{{64 << 10, false}, {1 << 20, false}, {64 << 10, true}, {1 << 20, true}} {
		size := c.size
		name := fmt.Sprintf("started/pipe=%dKiB", size>>10)
		if c.waiting {
			name = fmt.Sprintf("waiting/pipe=%dKiB", size>>10)
		}
		b.Run(name, func(b *testing.B) {
			var took []time.Duration
			for range b.N {
				dir := b.TempDir()
				ends := hostFIFOs(b, dir)
				if _, err := unix.FcntlInt(ends["in"].Fd(), unix.F_SETPIPE_SZ, size); err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				cmd := channelScript(ctx, b, in, channelInputScript, dir)
				began := time.Now()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				if c.waiting {
					waitReading(b, cmd.Process.Pid, filepath.Join(dir, "in"))
					began = time.Now()
				}
				conn := &timedEnds{fifoEnds: fifoEnds{r: ends["out"], w: ends["in"]}}
				o := ipc.Serve(ctx, conn, ipc.SessionConfig{Input: input, Capabilities: ipc.Capabilities{Log: true}, Ceiling: ipc.PermissiveCeiling()})
				err := cmd.Wait()
				cancel()
				conn.mu.Lock()
				if len(conn.spans) == 0 || err != nil || !o.Done || len(o.Logs) != 1 || o.Logs[0].Message != "999992" {
					b.Fatalf("guest: %v, outcome %+v", err, o)
				}
				// The first read to return brought the guest's call.
				took = append(took, conn.firstRead.Sub(began))
				conn.mu.Unlock()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2]), "ns/op")
		})
	}
}
