package runtimes

import (
	"encoding/json"
	"strings"
	"testing"
)

// These run Python through the bubblewrap stand-in for the jail (see
// pyodide_harness_test.go); they move to the real jail once it lands.

func pyRun(t *testing.T, in *Install, src string, input any) *runResult {
	t.Helper()
	l, err := in.Launch(Job{Runtime: Python, Source: []byte(src), MemoryBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return runBwrap(t, l, input, nil)
}

func wantDone(t *testing.T, r *runResult) {
	t.Helper()
	if r.Exit != 0 || r.Final == nil || r.Final.Type != "done" {
		t.Fatalf("want done and exit 0, got exit %d final %+v\nstdout: %s\nstderr: %s", r.Exit, r.Final, r.Stdout, r.Stderr)
	}
}

func TestPythonHello(t *testing.T) {
	r := pyRun(t, snapshotInstall(t), "print('hello')\n", nil)
	wantDone(t, r)
	if r.Stdout != "hello\n" {
		t.Errorf("stdout %q, want %q", r.Stdout, "hello\n")
	}
	t.Logf("snapshot hello: %v wall", r.Wall)
}

func TestPythonHandlerReturnsValue(t *testing.T) {
	src := `
import pmjail

def main(input, ctx):
    assert ctx.input == input == pmjail.input
    assert ctx.host is pmjail
    print("from handler")
    return {"sum": input["a"] + input["b"], "items": [1, "two", None, True], "nested": {"x": 1.5}}
`
	r := pyRun(t, snapshotInstall(t), src, map[string]int{"a": 2, "b": 40})
	wantDone(t, r)
	var got map[string]any
	if err := json.Unmarshal(r.Final.Value, &got); err != nil {
		t.Fatalf("done value %s: %v", r.Final.Value, err)
	}
	if got["sum"] != float64(42) || len(got["items"].([]any)) != 4 || got["nested"].(map[string]any)["x"] != 1.5 {
		t.Errorf("done value %s", r.Final.Value)
	}
	if r.Stdout != "from handler\n" {
		t.Errorf("stdout %q", r.Stdout)
	}
}

func TestPythonAsyncHandler(t *testing.T) {
	src := `
import asyncio

async def main(input, ctx):
    await asyncio.sleep(0.01)
    ctx.host.log.info("sync inside async")
    reply = await ctx.host.request.send_async({"url": "https://example.test/"})
    return reply["ok"]
`
	r := pyRun(t, snapshotInstall(t), src, nil)
	wantDone(t, r)
	if string(r.Final.Value) != "true" {
		t.Errorf("done value %s, want true", r.Final.Value)
	}
	if len(r.Calls) != 2 || r.Calls[0].Method != "log.info" || r.Calls[1].Method != "request.send" {
		t.Errorf("calls %+v", r.Calls)
	}
}

func TestPythonException(t *testing.T) {
	src := "import json\n\ndef helper(x):\n    return x['missing']\n\ndef main(input, ctx):\n    return helper({})\n"
	r := pyRun(t, snapshotInstall(t), src, nil)
	if r.Exit != 1 || r.Final == nil || r.Final.Type != "error" || r.Final.Error == nil {
		t.Fatalf("want error frame and exit 1, got exit %d final %+v stderr %s", r.Exit, r.Final, r.Stderr)
	}
	e := r.Final.Error
	if e.Name != "KeyError" || e.Message != "'missing'" {
		t.Errorf("error %s: %s", e.Name, e.Message)
	}
	for _, want := range []string{`File "/job/main.py", line 7, in main`, `File "/job/main.py", line 4, in helper`, "return x['missing']", "KeyError: 'missing'"} {
		if !strings.Contains(e.Stack, want) {
			t.Errorf("stack lacks %q:\n%s", want, e.Stack)
		}
	}
	if strings.Contains(e.Stack, "bootstrap.py") || strings.Contains(e.Stack, "_pyodide") {
		t.Errorf("stack shows pmjail's own frames:\n%s", e.Stack)
	}
}

func TestPythonSyntaxError(t *testing.T) {
	r := pyRun(t, snapshotInstall(t), "x = 1\nif x\n", nil)
	if r.Exit != 1 || r.Final == nil || r.Final.Error == nil || r.Final.Error.Name != "SyntaxError" {
		t.Fatalf("want SyntaxError, got exit %d final %+v", r.Exit, r.Final)
	}
	if !strings.Contains(r.Final.Error.Stack, `File "/job/main.py", line 2`) {
		t.Errorf("stack:\n%s", r.Final.Error.Stack)
	}
}

func TestPythonSysExit(t *testing.T) {
	r := pyRun(t, snapshotInstall(t), "import sys\nprint('bye')\nsys.exit(3)\nprint('not reached')\n", nil)
	if r.Exit != 3 || r.Final != nil {
		t.Fatalf("want exit 3 and no final frame, got exit %d final %+v stderr %s", r.Exit, r.Final, r.Stderr)
	}
	if r.Stdout != "bye\n" {
		t.Errorf("stdout %q", r.Stdout)
	}
}

func TestPythonStderrAndStdout(t *testing.T) {
	r := pyRun(t, snapshotInstall(t), "import sys\nprint('out')\nprint('err', file=sys.stderr)\n", nil)
	wantDone(t, r)
	if r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("stdout %q stderr %q", r.Stdout, r.Stderr)
	}
}

func TestPythonBrokerCalls(t *testing.T) {
	src := `
import pmjail

pmjail.log.info("hi there", {"k": 1})
pmjail.log.warn("plain")
reply = pmjail.request.send({"url": "https://example.test/x", "method": "POST", "body": "b"})
print(reply["ok"], reply["value"]["status"], reply["value"]["body"])
denied = pmjail.request.send({"url": "https://denied.test/"})
print(denied["ok"], denied["error"]["code"])
`
	in := snapshotInstall(t)
	l, err := in.Launch(Job{Runtime: Python, Source: []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	r := runBwrap(t, l, nil, func(method string, params json.RawMessage) (any, string) {
		if method == "request.send" && strings.Contains(string(params), "denied.test") {
			return nil, "denied"
		}
		return echoReplier(method, params)
	})
	wantDone(t, r)
	if len(r.Calls) != 4 {
		t.Fatalf("calls %+v", r.Calls)
	}
	if r.Calls[0].Method != "log.info" || string(r.Calls[0].Params) != `{"message":"hi there","meta":{"k":1}}` {
		t.Errorf("first call %s %s", r.Calls[0].Method, r.Calls[0].Params)
	}
	if r.Calls[1].Method != "log.warn" || string(r.Calls[1].Params) != `{"message":"plain"}` {
		t.Errorf("second call %s %s", r.Calls[1].Method, r.Calls[1].Params)
	}
	if r.Calls[2].Method != "request.send" {
		t.Errorf("third call %s", r.Calls[2].Method)
	}
	want := "True 200 echo:{\"url\":\"https://example.test/x\",\"method\":\"POST\",\"body\":\"b\"}\nFalse denied\n"
	if r.Stdout != want {
		t.Errorf("stdout %q, want %q", r.Stdout, want)
	}
}

func TestPythonPackageInstallRefused(t *testing.T) {
	src := `
import asyncio
for name in ("micropip", "numpy", "requests"):
    try:
        __import__(name)
        print(name, "IMPORTED")
    except ImportError as e:
        print(name, "refused" if "package installation is disabled in pmjail" in str(e) else "other: " + str(e))

import pyodide_js
for fn in ("loadPackage", "loadPackagesFromImports"):
    try:
        asyncio.run(getattr(pyodide_js, fn)("numpy")) if False else None
        from pyodide.ffi import run_sync
        run_sync(getattr(pyodide_js, fn)("numpy"))
        print(fn, "LOADED")
    except Exception as e:
        print(fn, "refused" if "package installation is disabled in pmjail" in str(e) else "other: " + str(e))
`
	r := pyRun(t, snapshotInstall(t), src, nil)
	wantDone(t, r)
	want := "micropip refused\nnumpy refused\nrequests refused\nloadPackage refused\nloadPackagesFromImports refused\n"
	if r.Stdout != want {
		t.Errorf("stdout %q, want %q", r.Stdout, want)
	}
}

// TestPythonCannotReachDeno checks that Python reaching into its Deno host
// through the FFI gets only the loader's (empty) permissions. The jail's
// root has none of these targets either, so a failure of the permission
// check alone changes nothing on the host.
func TestPythonCannotReachDeno(t *testing.T) {
	src := `
import os, js
from pyodide.ffi import run_sync

def attempt(label, fn):
    try:
        r = fn()
        print(label, "ALLOWED", repr(r)[:60])
    except Exception as e:
        print(label, "blocked", type(e).__name__, str(e)[:200].replace("\n", " "))

attempt("read", lambda: js.Deno.readTextFileSync("/etc/hostname"))
attempt("readdir", lambda: list(js.Deno.readDirSync("/")))
attempt("env", lambda: js.Deno.env.get("PATH"))
attempt("fetch", lambda: run_sync(js.fetch("http://192.0.2.1:81/")))
attempt("command", lambda: js.Deno.Command.new("/runtime/deno", js.JSON.parse('{"args": ["--version"]}')).outputSync())
attempt("write", lambda: js.Deno.writeTextFileSync("/tmp/pmjail-probe", "x"))
attempt("system", lambda: os.system("true"))
attempt("mount", lambda: __import__("pyodide_js").mountNodeFS("/mnt", "/"))
print("environ", sorted(os.environ))
`
	r := pyRun(t, snapshotInstall(t), src, nil)
	wantDone(t, r)
	t.Logf("probe output:\n%s", r.Stdout)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 9 {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	}
	for _, line := range lines[:8] {
		if !strings.Contains(line, " blocked ") {
			t.Errorf("not blocked: %s", line)
		}
	}
	for _, line := range lines[:6] {
		if !strings.Contains(line, "NotCapable") {
			t.Errorf("not refused by a Deno permission: %s", line)
		}
	}
	if lines[8] != "environ ['HOME', 'LANG', 'PATH', 'TMPDIR']" {
		t.Errorf("os.environ: %s", lines[8])
	}
}

func TestPythonReseededAfterRestore(t *testing.T) {
	in := snapshotInstall(t)
	src := "import random\nprint(random.random())\n"
	a, b := pyRun(t, in, src, nil), pyRun(t, in, src, nil)
	wantDone(t, a)
	wantDone(t, b)
	if a.Stdout == b.Stdout {
		t.Errorf("two runs from one snapshot printed the same random.random(): %s", a.Stdout)
	}
}
