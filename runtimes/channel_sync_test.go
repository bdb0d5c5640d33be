package runtimes

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// channelSyncScript plays the host's end against the real channel.js's
// callSync. The host runs on the guest's own thread here, so every frame
// the guest is to read is written before the call that reads it, and
// every frame it wrote is read after. It prints one line per step.
const channelSyncScript = `
import { Channel } from %q;
const [dir, mode] = Deno.args;
` + hostEndsJS + `
// readFrame reads one frame the guest wrote, as text.
const readFrame = () => {
  const head = new Uint8Array(4);
  hostOut.readSync(head);
  const body = new Uint8Array(new DataView(head.buffer).getUint32(0));
  for (let off = 0; off < body.length;) off += hostOut.readSync(body.subarray(off));
  return new TextDecoder().decode(body);
};
const print = (v) => console.log(JSON.stringify(v));
hostIn.writeSync(frame({ type: "start", input: null }));
const ch = new Channel(dir + "/in", dir + "/out");
await ch.started;
// The guest's first frame says it is ready, before it read the start.
const ready = readFrame();
if (ready !== '{"type":"ready"}') throw new Error("the guest's first frame is " + ready + ", not its ready frame");
switch (mode) {
  case "reply": {
    // A stale reply first (no call has its id): skipped, as by the
    // asynchronous path, and the call's own reply is taken.
    hostIn.writeSync(frame({ type: "reply", id: 99, ok: true, value: "stale" }));
    hostIn.writeSync(frame({ type: "reply", id: 1, ok: true, value: null }));
    print(ch.callSync("log.info", { message: "é" }));
    print(readFrame());
    hostIn.writeSync(frame({ type: "reply", id: 2, ok: false, error: { code: "rate_limited", message: "m" } }));
    print(ch.callSync("log.warn", { message: "y", meta: { k: 1 } }));
    print(readFrame());
    break;
  }
  case "busy": {
    // Another call in flight: callSync declines, and that call's reply
    // still reaches it.
    const pending = ch.call("request.send", { url: "http://x" });
    print(ch.callSync("log.info", { message: "x" }));
    print(readFrame());
    hostIn.writeSync(frame({ type: "reply", id: 1, ok: true, value: 7 }));
    print(await pending);
    hostIn.writeSync(frame({ type: "reply", id: 2, ok: true, value: null }));
    print(ch.callSync("log.info", { message: "z" }));
    print(readFrame());
    break;
  }
  case "credit": {
    // The host's credit on a log reply lets log calls of a message alone
    // go as notes, answered in place, while it covers them; a call of any
    // kind spends one of its calls, and a log call sent as a call ends it
    // until its own reply brings another.
    const credit = (calls, logs, bytes) => ({ calls, logs, bytes, message: 4, frame: 1 << 20 });
    hostIn.writeSync(frame({ type: "reply", id: 1, ok: true, value: null, credit: credit(10, 2, 5) }));
    print(ch.callSync("log.info", { message: "a" }));
    print(readFrame());
    print(ch.callSync("log.warn", { message: "bc" }));
    print(readFrame());
    // Longer than the credit's whole message: a call, whose reply's credit
    // is the one that counts from then on.
    hostIn.writeSync(frame({ type: "reply", id: 2, ok: true, value: null, credit: credit(9, 1, 2) }));
    print(ch.callSync("log.info", { message: "toolong" }));
    print(readFrame());
    // Over the bytes left: a call; its reply has no credit, so none is left.
    hostIn.writeSync(frame({ type: "reply", id: 3, ok: true, value: null }));
    print(ch.callSync("log.info", { message: "abc" }));
    print(readFrame());
    hostIn.writeSync(frame({ type: "reply", id: 4, ok: true, value: null, credit: credit(2, 5, 10) }));
    print(ch.callSync("log.info", { message: "d" }));
    print(readFrame());
    // A request in flight spends a call of the credit; a note still goes
    // while it waits, then the credit's calls are spent.
    const pending = ch.call("request.send", { url: "http://x" });
    print(readFrame());
    print(ch.callSync("log.info", { message: "e" }));
    print(readFrame());
    print(ch.callSync("log.info", { message: "f" }));
    hostIn.writeSync(frame({ type: "reply", id: 5, ok: true, value: 7 }));
    print(await pending);
    break;
  }
  case "oversize":
  case "garbage":
  case "closed": {
    if (mode === "oversize") hostIn.writeSync(new Uint8Array([0xff, 0xff, 0xff, 0x00]));
    if (mode === "garbage") hostIn.writeSync(new Uint8Array([0, 0, 0, 2, 0x7b, 0x78]));
    if (mode === "closed") hostIn.close();
    print(ch.callSync("log.info", { message: "x" }));
    // Later calls, of either kind, fail at once too.
    print(ch.callSync("log.info", { message: "y" }));
    print(await ch.call("log.info", { message: "z" }));
    break;
  }
}
`

// TestChannelCallSync: the synchronous call path reads its own reply past
// others, declines while another call is in flight (which then completes
// as before), writes the call as the asynchronous path does (the host's
// too_large skip relies on type, id and method coming first), and fails
// at once, with the reason, on a host stream that breaks or ends.
func TestChannelCallSync(t *testing.T) {
	in := testInstall(t, t.TempDir())
	broken := func(reason string) []string {
		return []string{reason, reason, reason}
	}
	for _, tc := range []struct {
		mode string
		want []string // a substring of each printed line, in order
	}{
		{"reply", []string{
			`{"ok":true,"value":null}`,
			`{\"type\":\"call\",\"id\":1,\"method\":\"log.info\",\"params\":{\"message\":\"é\"}}`,
			`{"ok":false,"error":{"code":"rate_limited","message":"m"}}`,
			`{\"type\":\"call\",\"id\":2,\"method\":\"log.warn\",\"params\":{\"message\":\"y\",\"meta\":{\"k\":1}}}`,
		}},
		{"busy", []string{
			`null`,
			`\"id\":1,\"method\":\"request.send\"`,
			`{"ok":true,"value":7}`,
			`{"ok":true,"value":null}`,
			`\"id\":2,\"method\":\"log.info\"`,
		}},
		{"credit", []string{
			`{"ok":true,"value":null}`,
			`{\"type\":\"call\",\"id\":1,\"method\":\"log.info\"`,
			`{"ok":true,"value":null}`,
			`"{\"type\":\"note\",\"method\":\"log.warn\",\"params\":{\"message\":\"bc\"}}"`,
			`{"ok":true,"value":null}`,
			`\"id\":2,\"method\":\"log.info\",\"params\":{\"message\":\"toolong\"}`,
			`{"ok":true,"value":null}`,
			`\"id\":3,\"method\":\"log.info\",\"params\":{\"message\":\"abc\"}`,
			`{"ok":true,"value":null}`,
			`\"id\":4,\"method\":\"log.info\"`,
			`\"id\":5,\"method\":\"request.send\"`,
			`{"ok":true,"value":null}`,
			`"{\"type\":\"note\",\"method\":\"log.info\",\"params\":{\"message\":\"e\"}}"`,
			`null`,
			`{"ok":true,"value":7}`,
		}},
		{"oversize", broken("channel broken: a frame of")},
		{"garbage", broken("channel broken")},
		{"closed", broken("channel closed")},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			for _, p := range []string{"in", "out"} {
				if err := unix.Mkfifo(filepath.Join(dir, p), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := channelScript(ctx, t, in, channelSyncScript, dir, tc.mode).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the guest still waits after 20 s: %s", out)
			}
			if err != nil {
				t.Fatalf("host script: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("want %d lines, got %q", len(tc.want), out)
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %d is %s, want it to hold %s", i+1, lines[i], w)
				}
				if strings.HasPrefix(w, "channel") && !strings.Contains(lines[i], `"code":"internal"`) {
					t.Errorf("line %d is %s, want code internal", i+1, lines[i])
				}
			}
		})
	}
}
