package integration

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		"read_via_symlink", "fetch_local", "connect_tcp", "connect_abstract", "command", "env_get", "env_all",
		"proc_pids", "uid", "kill_host", "ffi", "net_ifaces"} {
		wantJSFail(t, rep, p, "NotCapable", "TypeError")
	}
	wantJSFail(t, rep, "dynamic_import_passwd", "TypeError")
	wantJSFail(t, rep, "resolve_dns", "Error", "NotCapable")
	if !alive(victim) {
		t.Errorf("victim %d died", victim)
	}
}

// A static import is not checked by --allow-read: only the root keeps the
// file out.
func TestSecurityFilesystem_StaticImport(t *testing.T) {
	for _, typ := range []string{"text", "json"} {
		r := runScript(t, "imp.js", `import x from "/etc/passwd" with {type: "`+typ+`"};
console.log(String(x).slice(0, 40));`)
		if r.Status != "error" || r.Error == nil || strings.Contains(r.Stdout, "root:") ||
			!(strings.Contains(r.Error.Message, "/etc/passwd")) {
			t.Errorf("type %s: status %s stdout %q error %+v, want an error naming /etc/passwd", typ, r.Status, r.Stdout, r.Error)
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
		wantJSFail(t, rep, p, "TypeError", "ConnectionRefused", "PermissionDenied", "Error", "NotFound")
	}
	wantJSFail(t, rep, "command", "NotFound", "PermissionDenied")
	wantJSFail(t, rep, "kill_host", "NotFound")
	if !alive(victim) {
		t.Errorf("victim %d died", victim)
	}
	_ = os.Getpid
}

func TestSecurityProcess_WorkerMorePermissions(t *testing.T) {
	r := runScript(t, "worker.js", `new Worker("data:text/javascript,postMessage(1)", { type: "module", deno: { permissions: "inherit" } });
await new Promise((r) => setTimeout(r, 1000));
console.log("survived");`)
	if r.Status == "ok" || r.Error == nil || r.Error.Message == "" {
		t.Errorf("status %s error %+v stdout %q, want an explained error", r.Status, r.Error, r.Stdout)
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
			var flags []string
			if c.caps != "" {
				flags = []string{"--cap", c.caps}
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

func TestSecurityLeaks_OtherJobs(t *testing.T) {
	bin := buildProber(t)
	// Job A writes a secret in its /tmp and stays alive; job B looks for it.
	inv := make(chan Invocation, 1)
	dir := t.TempDir()
	_ = dir
	go func() {
		inv <- pmjailCmd(t, "", "exec", "--json", "--", "/bin/sh", "-c", `echo secret > /tmp/job-a-secret; i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`)
	}()
	_, rep := runProber(t, bin, nil, "list=/tmp", "proc_pids", "list=/job")
	var tmp []string
	if p := rep["list=/tmp"]; p.OK {
		_ = jsonUnmarshal(p.Detail, &tmp)
	}
	for _, n := range tmp {
		if strings.Contains(n, "job-a") {
			t.Errorf("job B sees job A's /tmp: %v", tmp)
		}
	}
	var pids []int
	if detail(t, rep, "proc_pids", &pids) && len(pids) > 3 {
		t.Errorf("job B sees pids %v", pids)
	}
	if a := <-inv; a.Result == nil || a.Result.Status != "ok" {
		t.Errorf("job A: exit %d", a.ExitCode)
	}
}
