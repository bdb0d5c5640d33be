package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChannelFloodCostsTheGuest: a guest that writes megabyte frames to
// the channel as fast as the host reads them used to cost the supervisor
// a core for the run's whole wall time (decoding a frame costs ~30 times
// what writing it costs), none of it the run's CPU time, so a run with a
// small CPU limit could keep a daemon core busy until its wall limit.
// Past the run's frame budget (ipc.Ceiling.MaxGuestBytes) the host reads a
// frame by its head only, as cheaply as the guest writes it: the guest now
// pays for its flood and meets its own CPU limit.
func TestChannelFloodCostsTheGuest(t *testing.T) {
	// Harmless outside a jail: it writes only to the jail's channel, and
	// stops where there is none.
	src := `let out;
try { out = Deno.openSync("/pmjail/channel/out", { write: true }); } catch { console.log("not jailed"); Deno.exit(0); }
const msg = "x".repeat((4 << 20) - 200);
const body = new TextEncoder().encode(JSON.stringify({ type: "note", method: "log.info", params: { message: msg } }));
const frame = new Uint8Array(4 + body.length);
new DataView(frame.buffer).setUint32(0, body.length);
frame.set(body, 4);
for (;;) { let off = 0; while (off < frame.length) off += out.writeSync(frame.subarray(off)); }
`
	res, host := supervisorCPU(t, src, "--cap", "log", "--timeout", "15s", "--cpu-time", "500ms")
	t.Logf("status %s after %d ms; guest CPU %d ms, supervisor CPU %s, %d frames", res.Status, res.Usage.WallMS, res.Usage.CPUMS, host.Round(time.Millisecond), res.Usage.BrokerCalls)
	if res.Status != "cpu_limit" {
		t.Fatalf("status %s (error %+v), want cpu_limit: the flood must cost the guest its CPU time, not the host's", res.Status, res.Error)
	}
	if host > 8*time.Second {
		t.Errorf("the supervisor spent %s of CPU on a guest limited to 500ms", host)
	}
}

// TestChannelSmallFramesCostTheGuest: small frames cost the host a
// decoding (or, past the run's frame budget, a head's reading) and a
// dispatch each, and the guest next to nothing: it writes a megabyte of
// them at a time. A guest writing small notes without end held a
// supervisor core for its whole wall time (9.8 s of CPU in a 10 s run, to
// the guest's 0.17 s) and ran into its wall limit, not its CPU limit. Each
// frame now counts at least 512 bytes against the budget, and a run that
// sends 16,384 calls and notes past it, each refused, is a protocol error.
func TestChannelSmallFramesCostTheGuest(t *testing.T) {
	// Harmless outside a jail: it writes only to the jail's channel, and
	// stops where there is none.
	src := `let out;
try { out = Deno.openSync("/pmjail/channel/out", { write: true }); } catch { console.log("not jailed"); Deno.exit(0); }
const body = new TextEncoder().encode(JSON.stringify({ type: "note", method: "log.info", params: { message: "" } }));
const one = new Uint8Array(4 + body.length);
new DataView(one.buffer).setUint32(0, body.length);
one.set(body, 4);
const n = Math.floor((1 << 20) / one.length);
const frames = new Uint8Array(n * one.length);
for (let i = 0; i < n; i++) frames.set(one, i * one.length);
for (;;) { let off = 0; while (off < frames.length) off += out.writeSync(frames.subarray(off)); }
`
	res, host := supervisorCPU(t, src, "--cap", "log", "--timeout", "10s", "--cpu-time", "500ms")
	t.Logf("status %s after %d ms; guest CPU %d ms, supervisor CPU %s, %d frames", res.Status, res.Usage.WallMS, res.Usage.CPUMS, host.Round(time.Millisecond), res.Usage.BrokerCalls)
	if res.Status != "protocol_error" {
		t.Fatalf("status %s (error %+v), want protocol_error: the flood must end before the run's wall limit", res.Status, res.Error)
	}
	if host > 3*time.Second {
		t.Errorf("the supervisor spent %s of CPU on a guest that spent %d ms", host, res.Usage.CPUMS)
	}
}

// TestChannelInputGetCostsTheHostACopy: input.get hands the guest the
// job's input, up to a megabyte, on each of up to MaxCalls calls. A guest
// that reads the replies raw pays a copy for each; the host used to pay a
// JSON encoding of the whole input (~10 ms a megabyte), a thousand times
// a run, none of it the run's CPU time. The input is checked once and
// spliced into each reply as the start frame splices it.
func TestChannelInputGetCostsTheHostACopy(t *testing.T) {
	input := filepath.Join(t.TempDir(), "input.json")
	if err := os.WriteFile(input, []byte(`{"blob":"`+strings.Repeat("y", 1000<<10)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Harmless outside a jail: it talks only to the jail's channel.
	src := `let out, inp;
try { out = Deno.openSync("/pmjail/channel/out", { write: true }); inp = Deno.openSync("/pmjail/channel/in", { read: true }); } catch { console.log("not jailed"); Deno.exit(0); }
const buf = new Uint8Array(1 << 20), hdr = new Uint8Array(4);
let got = 0;
for (let id = 1; id <= 300; id++) {
  const b = new TextEncoder().encode('{"type":"call","id":' + id + ',"method":"input.get","params":null}');
  const f = new Uint8Array(4 + b.length); new DataView(f.buffer).setUint32(0, b.length); f.set(b, 4);
  out.writeSync(f);
  // The reply, read raw and not parsed: a copy is all it costs the guest.
  let have = 0;
  while (have < 4) have += inp.readSync(hdr.subarray(have));
  let need = new DataView(hdr.buffer).getUint32(0);
  while (need > 0) { const n = inp.readSync(buf.subarray(0, Math.min(buf.length, need))); need -= n; got += n; }
}
console.log(got);
`
	res, host := supervisorCPU(t, src, "--timeout", "60s", "--input", "@"+input)
	t.Logf("status %s after %d ms; guest CPU %d ms, supervisor CPU %s; %s bytes read", res.Status, res.Usage.WallMS, res.Usage.CPUMS, host.Round(time.Millisecond), strings.TrimSpace(res.Stdout))
	if res.Status != "ok" || res.Usage.BrokerCalls != 300 {
		t.Fatalf("status %s, %d calls (error %+v), want ok and 300", res.Status, res.Usage.BrokerCalls, res.Error)
	}
	// 300 MB of replies: the guest pays a copy of each; the host paid an
	// encoding, several times the guest's copy (3x on this machine), and
	// now pays a copy too. Judged against the guest's own CPU, as the
	// machine's speed (a VM under emulation) scales both.
	guest := time.Duration(res.Usage.CPUMS) * time.Millisecond
	if host > guest*3/2+200*time.Millisecond {
		t.Errorf("the supervisor spent %s of CPU on 300 input.get calls, the guest %s", host, guest)
	}
}

// TestChannelRequestBodyCheckedOnce: the broker reads a request.send
// body for a _method field as each Content-Type the call gives makes a
// server read it, in the session's read loop, on CPU time no run counts.
// A call giving Content-Type 64 times (names that differ in case) had its
// body, a multipart form of tiny parts, parsed 64 times: one 4 MiB frame
// cost the daemon tens of seconds, and a run's frame budget minutes of a
// core, while the run's wall limit waited for it. A call now gives
// Content-Type once (invalid_request otherwise), and its body is read once.
func TestChannelRequestBodyCheckedOnce(t *testing.T) {
	// Harmless outside a jail: it talks only to the jail's channel, and
	// its calls name an origin nothing listens on.
	src := `let out, inp;
try { out = Deno.openSync("/pmjail/channel/out", { write: true }); inp = Deno.openSync("/pmjail/channel/in", { read: true }); } catch { console.log("not jailed"); Deno.exit(0); }
const headers = {};
for (let i = 0; i < 64; i++) {
  let name = "";
  for (const [j, c] of [..."content-type"].entries()) name += j < 6 && (i >> j) & 1 ? c.toUpperCase() : c;
  headers[name] = "multipart/form-data; boundary=b";
}
// Tiny parts cost a multipart reader the most a byte; the last names a
// method the job did not declare, so the call is refused once read.
const body = "--b\r\n\r\n\r\n".repeat(100000) + '--b\r\nContent-Disposition: form-data; name="_method"\r\n\r\nPATCH\r\n--b--\r\n';
const b = new TextEncoder().encode(JSON.stringify({ type: "call", id: 1, method: "request.send", params: { url: "http://127.0.0.1:9/", method: "POST", headers, body } }));
const f = new Uint8Array(4 + b.length); new DataView(f.buffer).setUint32(0, b.length); f.set(b, 4);
let off = 0;
while (off < f.length) off += out.writeSync(f.subarray(off));
const hdr = new Uint8Array(4);
let have = 0;
while (have < 4) have += inp.readSync(hdr.subarray(have));
const reply = new Uint8Array(new DataView(hdr.buffer).getUint32(0));
have = 0;
while (have < reply.length) have += inp.readSync(reply.subarray(have));
console.log(JSON.parse(new TextDecoder().decode(reply)).error.code);
`
	res, host := supervisorCPU(t, src, "--cap", "request=http://127.0.0.1:9:POST", "--timeout", "60s")
	t.Logf("status %s after %d ms; guest CPU %d ms, supervisor CPU %s; reply %s", res.Status, res.Usage.WallMS, res.Usage.CPUMS, host.Round(time.Millisecond), strings.TrimSpace(res.Stdout))
	if res.Status != "ok" || strings.TrimSpace(res.Stdout) != "invalid_request" {
		t.Errorf("status %s, reply %q (error %+v), want ok and the call refused invalid_request", res.Status, strings.TrimSpace(res.Stdout), res.Error)
	}
	if host > 3*time.Second {
		t.Errorf("the supervisor spent %s of CPU on one call of a 1 MB body, the guest %d ms", host, res.Usage.CPUMS)
	}
}

// supervisorCPU runs source with `pmjail run --json` and returns the
// result and the CPU time the supervisor spent on it: pmjail's rusage
// (its reaped children included) less the guest's, which the run's
// cgroup counted.
func supervisorCPU(t *testing.T, source string, flags ...string) (*Result, time.Duration) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guest.js")
	if err := os.WriteFile(path, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, argv, env := weakened(t, append(append([]string{"run", "--json"}, flags...), path))
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	var res Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("no result: %v\nstdout %.500s\nstderr %.2000s", err, stdout.String(), stderr.String())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return &res, total - time.Duration(res.Usage.CPUMS)*time.Millisecond
}
