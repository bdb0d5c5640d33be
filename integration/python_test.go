package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// These run Python end to end through the pmjail binary: the jail, the
// guest channel, the broker and Pyodide from its snapshot (the first run
// builds it; `make setup` normally has).

// pyHandler exercises most of the Python surface in one run: the handler
// form and its value, stdout and stderr, logs, brokered requests allowed
// and denied, refused package installs, Deno's powers out of Python's
// reach, and one random number for the reseeding check.
const pyHandler = `
import os, sys, random, js
import pmjail
from pyodide.ffi import run_sync

def attempt(label, fn):
    try:
        fn()
        return label + " ALLOWED"
    except Exception as e:
        return label + " blocked " + type(e).__name__ + " " + str(e)[:120].replace("\n", " ")

def main(input, ctx):
    assert ctx.input == input == pmjail.input and ctx.host is pmjail
    print("out")
    print("err", file=sys.stderr)
    pmjail.log.info("hi there", {"k": 1})
    ok = pmjail.request.send({"url": "__URL__/x", "method": "GET"})
    denied = pmjail.request.send({"url": "http://192.0.2.1/"})
    refused = []
    for name in ("micropip", "numpy", "requests"):
        try:
            __import__(name)
        except ImportError as e:
            refused.append("package installation is disabled in pmjail" in str(e))
    import pyodide_js
    for fn in ("loadPackage", "loadPackagesFromImports"):
        try:
            run_sync(getattr(pyodide_js, fn)("numpy"))
        except Exception as e:
            refused.append("package installation is disabled in pmjail" in str(e))
    probes = [
        attempt("read", lambda: js.Deno.readTextFileSync("/etc/hostname")),
        attempt("readdir", lambda: list(js.Deno.readDirSync("/"))),
        attempt("env", lambda: js.Deno.env.get("PATH")),
        attempt("fetch", lambda: run_sync(js.fetch("http://192.0.2.1:81/"))),
        attempt("command", lambda: js.Deno.Command.new("/runtime/deno", js.JSON.parse('{"args": ["--version"]}')).outputSync()),
        attempt("write", lambda: js.Deno.writeTextFileSync("/tmp/pmjail-probe", "x")),
        attempt("system", lambda: os.system("true")),
        attempt("mount", lambda: pyodide_js.mountNodeFS("/mnt", "/")),
    ]
    return {
        "sum": input["a"] + input["b"],
        "ok": [ok["ok"], ok.get("value", {}).get("status"), ok.get("value", {}).get("body")],
        "denied": [denied["ok"], denied.get("error", {}).get("code")],
        "refused": refused,
        "probes": probes,
        "environ": sorted(os.environ),
        "random": random.random(),
    }
`

// pyAsync is the async handler form; it prints a random number too.
const pyAsync = `
import asyncio, random

async def main(input, ctx):
    await asyncio.sleep(0.01)
    ctx.host.log.warn("from async")
    reply = await ctx.host.request.send_async({"url": "http://192.0.2.1/"})
    return {"denied": reply["ok"] is False, "random": random.random()}
`

func TestPythonEndToEnd(t *testing.T) {
	before := snapshotHost(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String()

	// Warm-up: builds the snapshot if missing, and checks a plain script.
	r := runScript(t, "hello.py", "print('hello')\n")
	if r.Status != "ok" || r.ExitCode != 0 || r.Stdout != "hello\n" {
		t.Fatalf("hello: %+v", r)
	}
	start := time.Now()
	r = runScript(t, "hello.py", "print('hello')\n")
	t.Logf("python hello: %v (wall_ms %d, peak %d MiB)", time.Since(start), r.Usage.WallMS, r.Usage.PeakMemoryBytes>>20)

	r = runScript(t, "handler.py", strings.ReplaceAll(pyHandler, "__URL__", url),
		"--cap", "log", "--cap", "request="+url+":GET", "--input", `{"a": 2, "b": 40}`)
	if r.Status != "ok" || r.ExitCode != 0 {
		t.Fatalf("handler: status %s exit %d error %+v stderr %s", r.Status, r.ExitCode, r.Error, r.Stderr)
	}
	if r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("stdout %q stderr %q", r.Stdout, r.Stderr)
	}
	if len(r.Logs) != 1 || r.Logs[0].Level != "info" || r.Logs[0].Message != "hi there" || compactJSON(r.Logs[0].Meta) != `{"k":1}` {
		t.Errorf("logs %+v", r.Logs)
	}
	var v struct {
		Sum     int             `json:"sum"`
		OK      json.RawMessage `json:"ok"`
		Denied  json.RawMessage `json:"denied"`
		Refused []bool          `json:"refused"`
		Probes  []string        `json:"probes"`
		Environ []string        `json:"environ"`
		Random  float64         `json:"random"`
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		t.Fatalf("value %s: %v", r.Value, err)
	}
	if v.Sum != 42 {
		t.Errorf("sum %d", v.Sum)
	}
	if compactJSON(v.OK) != `[true,200,"hello GET /x"]` {
		t.Errorf("allowed request: %s", v.OK)
	}
	if compactJSON(v.Denied) != `[false,"denied"]` {
		t.Errorf("denied request: %s", v.Denied)
	}
	if len(v.Refused) != 5 || slices.Contains(v.Refused, false) {
		t.Errorf("package installs refused: %v", v.Refused)
	}
	if len(v.Probes) != 8 {
		t.Errorf("probes %v", v.Probes)
	}
	for i, p := range v.Probes {
		want := "NotCapable"
		if strings.HasPrefix(p, "fetch ") {
			// fetch is the broker's (fetch.js): refused there.
			want = "fetch denied: origin http://192.0.2.1:81 is not declared in capabilities.request.urls"
		}
		if !strings.Contains(p, " blocked ") || (i < 6 && !strings.Contains(p, want)) {
			t.Errorf("Python reached its host: %s", p)
		}
	}
	if !slices.Equal(v.Environ, []string{"HOME", "LANG", "PATH", "TMPDIR"}) {
		t.Errorf("os.environ %v", v.Environ)
	}

	r = runScript(t, "async.py", pyAsync, "--cap", "log")
	if r.Status != "ok" || len(r.Logs) != 1 || r.Logs[0].Level != "warn" {
		t.Fatalf("async: %+v", r)
	}
	var av struct {
		Denied bool    `json:"denied"`
		Random float64 `json:"random"`
	}
	if err := json.Unmarshal(r.Value, &av); err != nil || !av.Denied {
		t.Errorf("async value %s: %v", r.Value, err)
	}
	if av.Random == v.Random {
		t.Errorf("two runs from one snapshot drew the same random.random(): %v", v.Random)
	}
	assertNothingLeft(t, before)
}

// compactJSON drops the indentation of the --json output.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func TestPythonFailures(t *testing.T) {
	r := runScript(t, "exc.py", "import json\n\ndef helper(x):\n    return x['missing']\n\ndef main(input, ctx):\n    return helper({})\n")
	if r.Status != "error" || r.ExitCode != 1 || r.Error == nil || r.Error.Code != "KeyError" || r.Error.Message != "'missing'" {
		t.Fatalf("exception: %+v", r)
	}
	for _, want := range []string{`File "/job/main.py", line 7, in main`, `File "/job/main.py", line 4, in helper`, "KeyError: 'missing'"} {
		if !strings.Contains(r.Error.Stack, want) {
			t.Errorf("stack lacks %q:\n%s", want, r.Error.Stack)
		}
	}
	if strings.Contains(r.Error.Stack, "bootstrap.py") || strings.Contains(r.Error.Stack, "_pyodide") {
		t.Errorf("stack shows pmjail's frames:\n%s", r.Error.Stack)
	}

	r = runScript(t, "syntax.py", "x = 1\nif x\n")
	if r.Status != "error" || r.Error == nil || r.Error.Code != "SyntaxError" || !strings.Contains(r.Error.Stack, `File "/job/main.py", line 2`) {
		t.Errorf("syntax error: %+v", r)
	}

	r = runScript(t, "exit.py", "import sys\nprint('bye')\nsys.exit(3)\nprint('not reached')\n")
	if r.ExitCode != 3 || r.Stdout != "bye\n" {
		t.Errorf("sys.exit(3): %+v", r)
	}
	// os._exit ends the process at once, with its code, as in CPython
	// (Pyodide throws it to the loader as an Exit error, which ended the
	// run as a guest error of code "Exit" and exit code 1).
	for _, c := range []struct {
		src    string
		status string
		code   int
	}{
		{"import os\nprint('bye', flush=True)\nos._exit(6)\nprint('not reached')\n", "error", 6},
		{"import os\n\ndef main(input):\n    print('bye', flush=True)\n    os._exit(0)\n", "ok", 0},
	} {
		r = runScript(t, "osexit.py", c.src)
		if r.Status != c.status || r.ExitCode != c.code || r.Stdout != "bye\n" || (c.code != 0 && (r.Error == nil || r.Error.Code != "exit")) {
			t.Errorf("os._exit(%d): status %s exit %d error %+v stdout %q stderr %q", c.code, r.Status, r.ExitCode, r.Error, r.Stdout, r.Stderr)
		}
	}
}

func TestPythonLimits(t *testing.T) {
	before := snapshotHost(t)
	r := runScript(t, "bomb.py", "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n", "--memory", "128M")
	if r.Status != "memory_limit" || !slices.Contains(r.LimitsHit, "memory") {
		t.Errorf("memory bomb: status %s limits %v exit %d stderr %.300s", r.Status, r.LimitsHit, r.ExitCode, r.Stderr)
	}
	r = runScript(t, "loop.py", "while True:\n    pass\n", "--timeout", "3s")
	if r.Status != "timeout" && r.Status != "cpu_limit" {
		t.Errorf("endless loop: status %s limits %v", r.Status, r.LimitsHit)
	}
	r = runScript(t, "flood.py", "while True:\n    print('x' * 1000)\n", "--output-limit", "64K")
	if r.Status != "output_limit" || !r.Truncated.Stdout {
		t.Errorf("print flood: status %s truncated %+v limits %v", r.Status, r.Truncated, r.LimitsHit)
	}
	assertNothingLeft(t, before)
}
