package integration

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// rawChannel gives a guest script direct access to the channel's outgoing
// FIFO, as any guest has: a hostile guest need not use the bootstrap.
const rawChannel = `const out = Deno.openSync("/pmjail/channel/out", { write: true });
function raw(bytes) { let o = 0; while (o < bytes.length) o += out.writeSync(bytes.subarray(o)); }
function header(n) { const h = new Uint8Array(4); new DataView(h.buffer).setUint32(0, n); return h; }
`

func TestChannelHostileFrames(t *testing.T) {
	cases := []struct {
		name, body string
	}{
		{"100MiB length", `raw(header(100 << 20)); raw(new Uint8Array(1024));`},
		{"zero length", `raw(header(0));`},
		{"invalid JSON", `const b = new TextEncoder().encode("{not json"); raw(header(b.length)); raw(b);`},
		{"not an object", `const b = new TextEncoder().encode("[1,2,3]"); raw(header(b.length)); raw(b);`},
		{"unknown type", `const b = new TextEncoder().encode('{"type":"pwn"}'); raw(header(b.length)); raw(b);`},
		{"garbage bytes", `raw(crypto.getRandomValues(new Uint8Array(4096)).map((x, i) => i < 1 ? 0x7f : x));`},
		{"bad call id", `const b = new TextEncoder().encode('{"type":"call","id":-1,"method":"log.info","params":{}}'); raw(header(b.length)); raw(b);`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The guest keeps running after its frame: the host must end it.
			res := runScript(t, "hostile.js", rawChannel+c.body+"\nawait new Promise(() => setInterval(() => {}, 1000));", "--timeout", "20s")
			if res.Status != "protocol_error" || res.ExitCode != 125 {
				t.Fatalf("status %s exit %d, want protocol_error 125; error %+v", res.Status, res.ExitCode, res.Error)
			}
			if res.Error == nil || res.Error.Message == "" {
				t.Fatal("no error message for a protocol error")
			}
			if res.Usage.WallMS > 10000 {
				t.Fatalf("protocol error took %d ms to end the run", res.Usage.WallMS)
			}
		})
	}
}

func TestChannelFrameThatNeverEnds(t *testing.T) {
	start := time.Now()
	res := runScript(t, "stall.js", rawChannel+`raw(header(100)); raw(new TextEncoder().encode('{"type":'));
await new Promise(() => setInterval(() => {}, 1000));`, "--timeout", "30s")
	if res.Status != "protocol_error" {
		t.Fatalf("status %s, want protocol_error (the frame timeout, not the wall clock); error %+v", res.Status, res.Error)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("a stalled frame ended the run only after %v", took)
	}
}

func TestChannelCallFlood(t *testing.T) {
	src := `const rs = await Promise.all(Array.from({ length: 5000 }, (_, i) => host.log.info("m" + i)));
const counts = {};
for (const r of rs) { const k = r.ok ? "ok" : r.error.code; counts[k] = (counts[k] ?? 0) + 1; }
console.log(JSON.stringify(counts));`
	// The test is of the rate limit: the flood's CPU gets room.
	res := runScript(t, "flood.js", src, append([]string{"--cap", "log"}, room...)...)
	if res.Status != "ok" {
		t.Fatalf("status %s error %+v stderr %s", res.Status, res.Error, res.Stderr)
	}
	var counts map[string]int
	if err := json.Unmarshal([]byte(res.Stdout), &counts); err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	if counts["ok"] == 0 || counts["rate_limited"] == 0 || counts["ok"]+counts["rate_limited"] != 5000 {
		t.Fatalf("counts %v: want some ok, the rest rate_limited", counts)
	}
	if len(res.Logs) > 1000 {
		t.Fatalf("%d logs kept, over the per-run cap", len(res.Logs))
	}
	if res.Usage.BrokerCalls != 5000 {
		t.Fatalf("broker_calls %d, want 5000", res.Usage.BrokerCalls)
	}

	// Without the capability calls are denied up to the per-run call cap,
	// then rate limited; none succeeds and the run still ends ok.
	res = runScript(t, "flood.js", src, room...)
	counts = nil
	if err := json.Unmarshal([]byte(res.Stdout), &counts); err != nil || res.Status != "ok" {
		t.Fatalf("without --cap log: status %s stdout %q", res.Status, res.Stdout)
	}
	if counts["ok"] != 0 || counts["denied"] == 0 || counts["denied"]+counts["rate_limited"] != 5000 {
		t.Fatalf("without --cap log: counts %v", counts)
	}
}

func TestHandlerValueRoundTrip(t *testing.T) {
	want := map[string]any{
		"text":   "héllo wörld ✓ 😀 \u0000 \"quoted\" \\",
		"nums":   []any{0.0, -1.0, 1.5, 1e300, 9007199254740991.0},
		"nested": map[string]any{"a": []any{true, false, nil, map[string]any{"b": []any{}}}},
		"empty":  map[string]any{},
	}
	data, _ := json.Marshal(want)
	res := runScript(t, "value.ts", fmt.Sprintf("export default (input: unknown) => (%s);", data))
	if res.Status != "ok" {
		t.Fatalf("status %s error %+v", res.Status, res.Error)
	}
	var got map[string]any
	if err := json.Unmarshal(res.Value, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("value round trip:\n got %v\nwant %v", got, want)
	}
}

func TestHandlerValueCaps(t *testing.T) {
	deep := runScript(t, "deep.js", `export default () => { let v = 1; for (let i = 0; i < 100; i++) v = [v]; return v; };`)
	if deep.Status != "error" || deep.Error == nil || !strings.Contains(strings.ToLower(deep.Error.Message), "deep") {
		t.Fatalf("100-deep value: status %s error %+v", deep.Status, deep.Error)
	}
	big := runScript(t, "big.js", `export default () => "x".repeat(5 << 20);`)
	if big.Status == "ok" || big.Error == nil {
		t.Fatalf("5 MiB value: status %s error %+v", big.Status, big.Error)
	}
	bigint := runScript(t, "bigint.js", `export default () => ({ n: 10n });`)
	if bigint.Status != "error" || bigint.Error == nil || !strings.Contains(bigint.Error.Message, "BigInt") {
		t.Fatalf("BigInt value: status %s error %+v", bigint.Status, bigint.Error)
	}
}

func TestTamperingWithHostWidensNothing(t *testing.T) {
	src := `
// Replace everything the guest can reach on its side; the host decides.
Object.prototype.ok = true;
Array.prototype.includes = () => true;
String.prototype.toLowerCase = function () { return "http://127.0.0.1"; };
JSON.stringify = ((orig) => (v) => orig({ ...v, capabilities: { request: { urls: ["*"] } } }))(JSON.stringify);
const r = await host.request.send({ url: "http://127.0.0.1:1/" });
const l = await host.log.info("x");
console.log(JSON.stringify({ request: r.error?.code, log: l.error?.code }));`
	res := runScript(t, "tamper.js", src)
	if res.Status != "ok" {
		t.Fatalf("status %s error %+v stderr %s", res.Status, res.Error, res.Stderr)
	}
	if !strings.Contains(res.Stdout, `"request":"denied"`) || !strings.Contains(res.Stdout, `"log":"denied"`) {
		t.Fatalf("after tampering: %s", res.Stdout)
	}
}

func TestGuestErrorMapsToResult(t *testing.T) {
	res := runScript(t, "throws.js", "const x = 1;\n\nfunction f() {\n  throw new TypeError(\"bad thing\");\n}\nexport default () => f();\n")
	if res.Status != "error" || res.ExitCode != 1 || res.Error == nil {
		t.Fatalf("status %s exit %d error %+v", res.Status, res.ExitCode, res.Error)
	}
	if res.Error.Code != "TypeError" || res.Error.Message != "bad thing" || !strings.Contains(res.Error.Stack, "/job/main.js:4:") {
		t.Fatalf("error %+v: want TypeError, message, stack at the user's line 4", res.Error)
	}
	// An error thrown later, from a timer, is reported the same way.
	res = runScript(t, "later.js", "setTimeout(() => { throw new RangeError(\"later\"); }, 10);\n")
	if res.Status != "error" || res.Error == nil || res.Error.Code != "RangeError" || !strings.Contains(res.Error.Stack, "/job/main.js:1:") {
		t.Fatalf("timer error: status %s error %+v", res.Status, res.Error)
	}
}
