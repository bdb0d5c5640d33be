package runtimes

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/ipc"
)

// channelNoteBudgetScript logs, through the real channel.js, messages of
// every kind JSON escapes differently in JavaScript and in Go until a
// call is refused, and prints how many it saw accepted. Within the
// host's credit every one after the first goes as a note, answered by
// the guest itself.
const channelNoteBudgetScript = `
import { Channel, makeHost } from %q;
const [dir] = Deno.args;
const ch = new Channel(dir + "/in", dir + "/out");
await ch.started;
const host = makeHost(ch, null);
const kinds = ["<a&b>", "\u2028\u2029", "\x01\x7f", "\ud800x", "q\"\\\n", "é€😀", "plain", "\udc00\ud800\ufffd", "\b\f\t\x00", "\u0085\ufeff\u200b"];
let ok = 0, refused = 0;
for (let i = 0; refused === 0 && i < 100000; i++) {
  const r = await host.log.info(kinds[i % kinds.length].repeat(1 + i % 5));
  if (r.ok) ok++; else refused++;
}
console.log(JSON.stringify({ ok, refused }));
await ch.finish({ type: "done", value: null });
`

// TestChannelNoteCreditCoversTheHostsCount: the bytes the guest counts
// against a note's credit are never fewer than the host counts for the
// same log: every log the guest answered itself as accepted is kept,
// and the only one dropped is the call the host refused. The host counts
// a log as its result holds it, HTML-safe (<, > and & take six bytes,
// as U+2028 and U+2029 do), which JSON.stringify does not escape.
func TestChannelNoteCreditCoversTheHostsCount(t *testing.T) {
	in := testInstall(t, t.TempDir())
	dir := t.TempDir()
	ends := hostFIFOs(t, dir)
	ceil := ipc.PermissiveCeiling()
	ceil.MaxLogs = 1 << 20
	ceil.MaxCalls = 1 << 20
	ceil.MaxLogBytes = 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan ipc.Outcome, 1)
	go func() {
		served <- ipc.Serve(ctx, &fifoEnds{r: ends["out"], w: ends["in"]}, ipc.SessionConfig{Capabilities: ipc.Capabilities{Log: true}, Ceiling: ceil})
	}()
	out, err := channelScript(ctx, t, in, channelNoteBudgetScript, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("guest script: %v\n%.500s", err, out)
	}
	var seen struct{ OK, Refused int }
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &seen); err != nil {
		t.Fatalf("guest said %q: %v", out, err)
	}
	o := <-served
	if !o.Done || o.ProtocolError != nil || o.HostError != nil {
		t.Fatalf("session outcome: done %v, protocol error %v, host error %v", o.Done, o.ProtocolError, o.HostError)
	}
	if seen.Refused != 1 || len(o.Logs) != seen.OK || o.LogsDropped != 1 {
		t.Errorf("the guest saw %d logs accepted and %d refused; the host kept %d and dropped %d: a note the guest counted within its credit was refused",
			seen.OK, seen.Refused, len(o.Logs), o.LogsDropped)
	}
	kept, err := json.Marshal(o.Logs)
	if err != nil {
		t.Fatal(err)
	}
	// Each entry's JSON is ~40 bytes besides its message.
	if max := ceil.MaxLogBytes + 64*len(o.Logs); len(kept) > max {
		t.Errorf("%d logs take %d bytes as JSON, over the %d-byte budget and their entries' frame (%d)", len(o.Logs), len(kept), ceil.MaxLogBytes, max)
	}
	t.Logf("%d logs kept, %d bytes as JSON", len(o.Logs), len(kept))
}
