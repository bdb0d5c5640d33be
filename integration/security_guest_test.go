package integration

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostTargets starts what the hostile guest aims at on the host: a TCP
// listener on 127.0.0.1, an abstract Unix socket and a victim process.
func hostTargets(t *testing.T) (port int, abstract string, victim int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Errorf("the guest reached the host's TCP listener from %v", c.RemoteAddr())
			c.Close()
		}
	}()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	abstract = "pmjail-test-" + hex.EncodeToString(b)
	ul, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ul.Close() })
	go func() {
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			t.Errorf("the guest reached the host's abstract socket @%s", abstract)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, abstract, startVictim(t)
}

func hostileJS(t *testing.T) (string, int) {
	port, abs, victim := hostTargets(t)
	return fill(testdata(t, "hostile.js"), "PORT", itoa(port), "ABSTRACT", abs, "VICTIM", itoa(victim)), victim
}

// Under `pmjail run`: Deno's own permissions answer first.
func TestSecurityFilesystem_JSRun(t *testing.T) {
	src, victim := hostileJS(t)
	r := runScript(t, "hostile.js", src)
	rep := parseJSReport(t, r)
	for _, p := range []string{"read_passwd", "read_hostname", "read_root", "read_repo", "read_proc1_root",
		"list_proc_self_root_up", "read_traversal", "list_root", "write_root", "write_tmp", "symlink_tmp",
		"read_via_symlink", "symlink_scratch", "write_deno_dir", "fetch_local", "connect_tcp", "connect_abstract", "command", "env_get", "env_all",
		"proc_pids", "kill_host", "ffi", "net_ifaces"} {
		wantJSFail(t, rep, p, "NotCapable", "TypeError")
	}
	// The guest may ask its uid (node:fs's access needs it): the one its
	// user namespace maps, the same in every job, never its lease's host
	// uid, which would tell the host's job ids.
	if u := rep["uid"]; !u.OK || string(u.Value) != "1000" {
		t.Errorf("probe uid: %+v, want the namespace's 1000", u)
	}
	wantJSFail(t, rep, "dynamic_import_passwd", "TypeError")
	wantJSFail(t, rep, "resolve_dns", "Error", "NotCapable")
	if !alive(victim) {
		t.Errorf("victim %d died", victim)
	}
}

// A host file that is valid JSON, so that only its absence can fail the
// import (/etc/passwd fails as JSON even unjailed).
const staticImportSecret = `{"secret": "host-only"}`

// A static import of the main module is not checked by --allow-read:
// under `deno run` in the jail, only the root keeps a host file out. Under
// `pmjail run` the bootstrap imports the job, so Deno's permissions refuse
// first; the file must stay out either way.
func TestSecurityFilesystem_StaticImport(t *testing.T) {
	dir := outsideTmpDir(t, "itest-import-")
	secret := filepath.Join(dir, "secret.json")
	writeFile(t, secret, staticImportSecret)
	scripts := outsideTmpDir(t, "itest-script-")
	src := `import x from ` + jsString(secret) + ` with {type: "json"};
console.log(JSON.stringify(x));`
	writeFile(t, filepath.Join(scripts, "imp.js"), src)

	// Unjailed, the import loads: the file is one the attack would get.
	cmd := exec.Command(denoBin(t), "run", "--no-config", filepath.Join(scripts, "imp.js"))
	cmd.Env = append(os.Environ(), "DENO_DIR="+t.TempDir(), "NO_COLOR=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "host-only") {
		t.Fatalf("unjailed, deno run does not load %s (%v): %s", secret, err, out)
	}

	inv := pmjailCmd(t, "", "exec", "--json", "--ro-bind", scripts+":/script", "--", denoBin(t), "run", "--no-config", "/script/imp.js")
	if r := inv.Result; r == nil || r.Status == "ok" || strings.Contains(r.Stdout, "host-only") ||
		!strings.Contains(r.Stderr, "Module not found") || !strings.Contains(r.Stderr, secret) {
		t.Errorf("deno run in the jail imports %s: %+v, want it not found (stdout must not hold host-only)", secret, r)
	}

	for _, c := range []struct{ path, typ string }{{secret, "json"}, {"/etc/passwd", "text"}} {
		r := runScript(t, "imp.js", `import x from `+jsString(c.path)+` with {type: "`+c.typ+`"};
console.log(JSON.stringify(x).slice(0, 40));`)
		if r.Status != "error" || r.Error == nil || strings.Contains(r.Stdout, "host-only") || strings.Contains(r.Stdout, "root:") ||
			!strings.Contains(r.Error.Message, c.path) {
			t.Errorf("pmjail run imports %s as %s: status %s stdout %q error %+v, want an error naming it", c.path, c.typ, r.Status, r.Stdout, r.Error)
		}
	}
}

// The same hostile script with every Deno permission, run by `deno run -A`
// inside the jail: the kernel layers alone must stop each attempt.
func TestSecurityFilesystem_JSAllowAll(t *testing.T) {
	src, victim := hostileJS(t)
	dir := outsideTmpDir(t, "itest-script-")
	writeFile(t, filepath.Join(dir, "x.js"), src)
	inv := pmjailCmd(t, "", "exec", "--json", "--ro-bind", dir+":/script", "--", denoBin(t), "run", "-A", "--no-config", "/script/x.js")
	if inv.Result == nil {
		t.Fatalf("no result: %s", inv.Stderr)
	}
	r := inv.Result
	if r.Status != "ok" {
		t.Fatalf("deno -A in the jail: status %s exit %d signal %s error %+v denied %v stderr %q",
			r.Status, r.ExitCode, r.Signal, r.Error, r.Denied, r.Stderr)
	}
	rep := parseJSReport(t, r)
	for _, p := range []string{"read_passwd", "read_hostname", "read_root", "read_traversal", "read_via_symlink", "dynamic_import_passwd"} {
		wantJSFail(t, rep, p, "NotFound", "TypeError")
	}
	// pid 1 is the jail's init stage, which the guest may not look into.
	wantJSFail(t, rep, "read_proc1_root", "NotFound", "TypeError", "PermissionDenied")
	// exec binds a program at its own host path, so the root holds that
	// path's directories — empty but for the way to the one bound file.
	if strings.HasPrefix(denoBin(t), "/work/main/") {
		if p := rep["read_repo"]; p.OK && string(p.Value) != "1" {
			t.Errorf("read_repo under exec lists %s entries of /work/main, want only the bound binary's path", p.Value)
		}
	} else {
		wantJSFail(t, rep, "read_repo", "NotFound", "TypeError")
	}
	wantJSFail(t, rep, "write_root", "Error", "NotSupported", "PermissionDenied")
	for _, p := range []string{"fetch_local", "connect_tcp", "connect_udp", "resolve_dns", "connect_abstract"} {
		// Landlock refuses a TCP connect where its ABI has network rules
		// (PermissionDenied); elsewhere the empty namespace answers.
		wantJSFail(t, rep, p, "TypeError", "ConnectionRefused", "NetworkUnreachable", "PermissionDenied", "Error", "NotFound")
	}
	wantJSFail(t, rep, "command", "NotFound", "PermissionDenied")
	wantJSFail(t, rep, "kill_host", "NotFound")
	if !alive(victim) {
		t.Errorf("victim %d died", victim)
	}
	_ = os.Getpid
}

// workerAsksMore starts a worker (inheriting its parent's permissions, the
// stable default) that asks Deno for read and run access in general and
// reads a host file; it reports each answer.
const workerAsksMore = `async function inWorker() {
  const out = {};
  for (const name of ["read", "run"]) {
    try { out[name] = (await Deno.permissions.request({ name })).state; } catch (e) { out[name] = e.name; }
  }
  try { Deno.readTextFileSync("/etc/hostname"); out.read_file = "read"; } catch (e) { out.read_file = e.name; }
  postMessage(out);
}
const w = new Worker("data:text/javascript," + encodeURIComponent("(" + inWorker + ")()"), { type: "module" });
const got = await new Promise((res, rej) => { w.onmessage = (e) => res(e.data); w.onerror = (e) => { e.preventDefault(); rej(new Error(e.message)); }; });
w.terminate();
console.log(JSON.stringify(got));`

// A worker holds no more than its parent: asking for more is refused by
// Deno's permission layer, and so is the host file. A worker that declares
// more permissions at its creation is an unstable API (pmjail passes no
// --unstable-worker-options): the whole run ends, and the result says why.
func TestSecurityProcess_WorkerMorePermissions(t *testing.T) {
	r := runScript(t, "worker.js", workerAsksMore)
	if r.Status != "ok" {
		t.Fatalf("status %s error %+v stderr %q", r.Status, r.Error, r.Stderr)
	}
	var got map[string]string
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if err := jsonUnmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("worker report %q: %v", r.Stdout, err)
	}
	for name, want := range map[string]string{"read": "denied", "run": "denied", "read_file": "NotCapable"} {
		if got[name] != want {
			t.Errorf("the worker asking for %s got %q, want %q (the permission layer's refusal)", name, got[name], want)
		}
	}

	r = runScript(t, "worker.js", `const w = new Worker("data:text/javascript,postMessage(1)", { type: "module", deno: { permissions: { read: true, run: true } } });
await new Promise((r) => { w.onmessage = r; });
console.log("survived");`)
	explained := strings.Contains(r.Stderr, "--unstable-worker-options") || (r.Error != nil && strings.Contains(r.Error.Message, "escalate"))
	if r.Status == "ok" || strings.Contains(r.Stdout, "survived") || r.Error == nil || !explained {
		t.Errorf("a worker declaring more permissions: status %s error %+v stdout %q stderr %q, want the run refused and why", r.Status, r.Error, r.Stdout, r.Stderr)
	}
}

func TestSecurityBroker_Requests(t *testing.T) {
	srv := newTestServer(t)
	cases := []struct {
		name, caps, url, method, want string
	}{
		{"allowed", "request=" + srv.origin + ":GET", srv.origin + "/ok", "GET", "200"},
		{"other origin", "request=" + srv.origin + ":GET", "http://127.0.0.2:" + srv.port + "/ok", "GET", "denied"},
		{"other port", "request=" + srv.origin + ":GET", "http://127.0.0.1:1/ok", "GET", "denied"},
		{"other method", "request=" + srv.origin + ":GET", srv.origin + "/ok", "POST", "denied"},
		{"redirect away", "request=" + srv.origin + ":GET", srv.origin + "/redirect", "GET", "denied"},
		{"userinfo", "request=" + srv.origin + ":GET", "http://user:pw@127.0.0.1:" + srv.port + "/ok", "GET", "denied"},
		{"too large", "request=" + srv.origin + ":GET", srv.origin + "/big", "GET", "too_large"},
		{"no cap", "", srv.origin + "/ok", "GET", "denied"},
		{"localhost by name", "request=http://localhost:" + srv.port + ":GET", "http://localhost:" + srv.port + "/ok", "GET", "denied"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := `const r = await host.request.send({ url: ` + jsString(c.url) + `, method: "` + c.method + `" });
console.log(JSON.stringify(r.ok ? { status: r.value.status, body: r.value.body } : r.error));`
			caps := c.caps
			if weakenedLayer() == layerCapabilities {
				caps = capsFor(t, c.url, c.method)
			}
			var flags []string
			if caps != "" {
				flags = []string{"--cap", caps}
			}
			r := runScript(t, "req.js", src, flags...)
			if r.Status != "ok" {
				t.Fatalf("status %s error %+v", r.Status, r.Error)
			}
			out := strings.TrimSpace(r.Stdout)
			if c.want == "200" {
				if out != `{"status":200,"body":"hello from the host"}` {
					t.Errorf("got %s", out)
				}
			} else if !strings.Contains(out, `"code":"`+c.want+`"`) {
				t.Errorf("got %s, want code %s", out, c.want)
			}
		})
	}
	if srv.hits.Load() > 2 {
		t.Errorf("the server saw %d requests, want only the allowed one and the redirect", srv.hits.Load())
	}
	r := runScript(t, "log.js", `const r = await host.log.info("hi"); console.log(r.ok ? "ok" : r.error.code);`)
	if strings.TrimSpace(r.Stdout) != "denied" || len(r.Logs) != 0 {
		t.Errorf("log without --cap log: %q logs %d, want denied", r.Stdout, len(r.Logs))
	}
}

// Job A writes a secret in its /tmp and holds until the test releases it;
// job B, run meanwhile, looks for it and for A's processes.
func TestSecurityLeaks_OtherJobs(t *testing.T) {
	bin := buildProber(t)
	gate := outsideTmpDir(t, "itest-gate-")
	release := filepath.Join(gate, "release")
	// The gate is a file that appears in a bound directory: pmjail refuses
	// to bind a FIFO or a socket (a channel out of the jail). Job A, the
	// prober's hold, polls for it with sleeps, so that it spends no CPU
	// while job B runs (the VM's emulated CPU is slow).
	a := exec.Command(pmjail, "exec", "--ro-bind", gate+":/gate", "--", bin, "hold", "/gate/release")
	// A pipe of our own, so that waiting for A need not wait for its reader.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	a.Stdout, a.Stderr = pw, os.Stderr
	err = a.Start()
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- a.Wait() }()
	var aErr error
	aDone := false
	// releaseA makes the gate's file, and waits for A to end.
	releaseA := func() {
		if aDone {
			return
		}
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Error(err)
		}
		select {
		case aErr = <-ended:
		case <-time.After(time.Minute):
			_ = a.Process.Kill()
			aErr = <-ended
		}
		aDone = true
	}
	defer releaseA()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("job A ended without writing its secret")
		}
	case <-time.After(time.Minute):
		t.Fatalf("job A did not write its secret within a minute")
	}

	_, rep := runProber(t, bin, nil, "list=/tmp", "proc_pids", "list=/job")
	var tmp []string
	if detail(t, rep, "list=/tmp", &tmp) && slices.ContainsFunc(tmp, func(n string) bool { return strings.Contains(n, "job-a") }) {
		t.Errorf("job B sees job A's /tmp: %v", tmp)
	}
	// exec's root has no /job; a run's holds only its own files.
	if p := rep["list=/job"]; p.OK && strings.Contains(string(p.Detail), "job-a") {
		t.Errorf("job B's /job holds job A's files: %s", p.Detail)
	} else if !p.OK && p.Errno != "ENOENT" {
		t.Errorf("list=/job: %+v, want a listing or ENOENT", p)
	}
	var pids []int
	if detail(t, rep, "proc_pids", &pids) && len(pids) > 3 {
		t.Errorf("job B sees pids %v", pids)
	}

	releaseA()
	if aErr != nil {
		t.Errorf("job A: %v", aErr)
	}
}
