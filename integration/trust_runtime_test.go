package integration

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// listenUnix starts a host service's stand-in at path: a pathname Unix
// socket anyone may connect to, as many services' are. Reaching it from a
// jail fails the test.
func listenUnix(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Errorf("a jailed program reached the host's Unix socket %s", path)
			c.Close()
		}
	}()
}

// guest → host: a host service's Unix socket (or a named pipe) under an
// exec's --ro-bind is refused at set-up, wherever in the bound tree it
// lies. A read-only bind does not stop connect(), and the job's empty
// network namespace holds only abstract sockets: a pathname socket is
// reached through the file system.
func TestTrust_ExecBindRefusesUnixSockets(t *testing.T) {
	prober := buildProber(t)
	dir := outsideTmpDir(t, "itest-bindsock-")
	svc := filepath.Join(dir, "run", "svc")
	if err := os.MkdirAll(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(svc, "svc.sock")
	listenUnix(t, sock)

	// A named pipe is the same channel to a host process, and a read-only
	// mount does not stop writing to it (only Landlock, where applied).
	pipes := outsideTmpDir(t, "itest-bindfifo-")
	fifo := filepath.Join(pipes, "feed")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o666); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ bind, target, found, what string }{
		{dir + ":/host", "/host/run/svc/svc.sock", sock, "a socket"}, // deep in a bound tree
		{svc, sock, sock, "a socket"},                                // its own directory, at the same path
		{sock + ":/svc.sock", "/svc.sock", sock, "a socket"},         // the socket itself
		{pipes + ":/pipes", "/pipes/feed", fifo, "a named pipe"},
	} {
		inv := pmjailCmd(t, "", "exec", "--json", "--ro-bind", c.bind, "--", prober, "unix_connect="+c.target)
		r := inv.Result
		if r == nil {
			t.Fatalf("--ro-bind %s: no result (exit %d)\nstdout: %s\nstderr: %s", c.bind, inv.ExitCode, inv.Stdout, inv.Stderr)
		}
		if inv.ExitCode != 125 || r.Status != "refused" || r.Error == nil ||
			!strings.Contains(r.Error.Message, "--ro-bind") || !strings.Contains(r.Error.Message, c.found+" is "+c.what) {
			t.Errorf("--ro-bind %s: exit %d status %s error %+v stdout %q, want 125, refused, naming the flag and %s as %s",
				c.bind, inv.ExitCode, r.Status, r.Error, r.Stdout, c.found, c.what)
		}
	}

	// A tree without a socket or pipe still binds.
	data := outsideTmpDir(t, "itest-bindplain-")
	if err := os.Mkdir(filepath.Join(data, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(data, "sub", "file"), "plain")
	r, reports := runProber(t, prober, []string{"--ro-bind", data + ":/data"}, "unix_connect=/data/sub/file")
	if r.Status != "ok" {
		t.Errorf("a bind without a socket: status %s error %+v", r.Status, r.Error)
	}
	// A regular file is no socket: no write permission, or none listening.
	wantErrno(t, reports, "unix_connect=/data/sub/file", "EACCES", "ECONNREFUSED")
}

// guest → host: Deno's import permission (loading code from remote hosts)
// is denied outright, not merely unusable for want of a network.
func TestTrust_DenoImportPermissionDenied(t *testing.T) {
	src := `{ let h = null; try { h = Deno.hostname(); } catch (e) { if (e?.name !== "NotCapable") throw e; }
  if (h !== null && h !== "pmjail") { console.error("not jailed"); Deno.exit(93); } }
const out = {
  any: Deno.permissions.querySync({ name: "import" }).state,
  host: Deno.permissions.querySync({ name: "import", host: "example.com" }).state,
};
try { await import("https://example.com/x.js"); out.remote = "loaded"; } catch (e) { out.remote = e.name; }
console.log(JSON.stringify(out));`
	for _, profile := range []string{"default", "strict"} {
		res := runScript(t, "import.js", src, "--profile", profile)
		var out struct{ Any, Host, Remote string }
		if res.Status != "ok" || json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &out) != nil {
			t.Fatalf("%s: status %s stdout %q stderr %q error %+v", profile, res.Status, res.Stdout, res.Stderr, res.Error)
		}
		if out.Any != "denied" || out.Host != "denied" || out.Remote == "loaded" {
			t.Errorf("%s: import permission %+v, want denied for every host and the remote import failing", profile, out)
		}
		if d := layerDetail(decodePosture(t, res.Posture), "deno_permissions"); !strings.Contains(d, "--deny-import") {
			t.Errorf("%s: deno_permissions detail %q does not name --deny-import", profile, d)
		}
	}
}

// timingProbe measures, in a strict run, what a guest could time with: the
// clock's resolution on the main thread and in a Worker, SharedArrayBuffer
// and Atomics in each, and whether shared WebAssembly memory gives a
// SharedArrayBuffer; and checks that what the mitigation must not break
// (timers, node: modules) still works.
const timingProbe = `{ let h = null; try { h = Deno.hostname(); } catch (e) { if (e?.name !== "NotCapable") throw e; }
  if (h !== null && h !== "pmjail") { console.error("not jailed"); Deno.exit(93); } }
const probe = () => {
  let res = Infinity, prev = performance.now();
  for (let i = 0; i < 200000; i++) { const t = performance.now(); if (t !== prev) { res = Math.min(res, t - prev); prev = t; } }
  let wasm;
  try { wasm = Object.prototype.toString.call(new WebAssembly.Memory({ shared: true, initial: 1, maximum: 1 }).buffer); }
  catch (e) { wasm = e.name; }
  return { res: res === Infinity ? -1 : res, sab: typeof SharedArrayBuffer, atomics: typeof Atomics, wasm };
};
const out = { main: probe() };
try { await new Promise((ok) => setTimeout(ok, 5)); out.timeout = "ok"; } catch (e) { out.timeout = String(e); }
try { out.path = (await import("node:path")).join("a", "b"); } catch (e) { out.path = String(e); }
try { out.buffer = (await import("node:buffer")).Buffer.from("hi").toString("hex"); } catch (e) { out.buffer = String(e); }
try {
  const url = URL.createObjectURL(new Blob(["postMessage((" + probe + ")());"], { type: "text/javascript" }));
  const w = new Worker(url, { type: "module" });
  out.worker = await new Promise((ok, bad) => { w.onmessage = (e) => ok(e.data); w.onerror = (e) => { e.preventDefault(); bad(e.message); }; });
  w.terminate();
} catch (e) { out.worker = { error: String(e) }; }
console.log(JSON.stringify(out));`

type timingSide struct {
	Res     float64 `json:"res"`
	SAB     string  `json:"sab"`
	Atomics string  `json:"atomics"`
	Wasm    string  `json:"wasm"`
	Error   string  `json:"error"`
}

// guest → host (and its other guests): strict's timing mitigation either
// holds in Workers and WebAssembly too or its posture says degraded and
// why; either way timers and node: modules keep working.
func TestTrust_StrictTimingHoldsOrSaysDegraded(t *testing.T) {
	res := runScript(t, "timing.js", timingProbe, "--profile", "strict")
	var out struct {
		Main, Worker          timingSide
		Timeout, Path, Buffer string
	}
	if res.Status != "ok" || json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &out) != nil {
		t.Fatalf("strict: status %s stdout %q stderr %q error %+v", res.Status, res.Stdout, res.Stderr, res.Error)
	}
	t.Logf("strict: %+v", out)
	if out.Timeout != "ok" || out.Path != "a/b" || out.Buffer != "6869" || out.Worker.Error != "" {
		t.Errorf("strict broke the runtime: setTimeout %q, node:path %q, node:buffer %q, worker %q", out.Timeout, out.Path, out.Buffer, out.Worker.Error)
	}
	if out.Main.Res < 1 || out.Main.SAB != "undefined" {
		t.Errorf("strict main thread: resolution %v ms, SharedArrayBuffer %s; want at least 1 ms and none", out.Main.Res, out.Main.SAB)
	}
	holds := true
	for name, side := range map[string]timingSide{"main": out.Main, "worker": out.Worker} {
		if side.Res < 1 || side.SAB != "undefined" || side.Wasm == "[object SharedArrayBuffer]" {
			holds = false
			t.Logf("%s: resolution %v ms, SharedArrayBuffer %s, shared wasm memory %s: a finer clock is within reach", name, side.Res, side.SAB, side.Wasm)
		}
	}
	p := decodePosture(t, res.Posture)
	state, detail := p.state("timing_mitigation"), layerDetail(p, "timing_mitigation")
	switch {
	case holds && state == "applied":
	case !holds && state == "degraded" && strings.Contains(detail, "Worker") && strings.Contains(detail, "WebAssembly"):
	default:
		t.Errorf("strict: timing_mitigation %s (%q) while the mitigation holds=%v; want applied only if it holds, else degraded naming Workers and WebAssembly", state, detail, holds)
	}
}

func layerDetail(p *posture, layer string) string {
	for _, l := range p.Layers {
		if l.Name == layer {
			return l.Detail
		}
	}
	return ""
}
