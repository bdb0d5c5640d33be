package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// startProbe prints what a program reads of how it was started. `deno
// run main.js` gives it no arguments and itself as the main module.
// A Worker of it has no arguments either.
const startProbe = `import process from "node:process";
const src = "postMessage(JSON.stringify([Deno.args, globalThis.process.argv.slice(2)]))";
const w = new Worker(URL.createObjectURL(new Blob([src], { type: "application/javascript" })), { type: "module" });
const worker = await new Promise((resolve) => (w.onmessage = (e) => resolve(JSON.parse(e.data))));
w.terminate();
console.log(JSON.stringify({ args: Deno.args, main: Deno.mainModule, argv: process.argv.slice(1), worker }));
`

type startSeen struct {
	Args   []string   `json:"args"`
	Main   string     `json:"main"`
	Argv   []string   `json:"argv"`
	Worker [][]string `json:"worker"`
}

func checkStart(t *testing.T, how, status, stdout, file string) {
	t.Helper()
	var seen startSeen
	if status != "ok" || json.Unmarshal([]byte(stdout), &seen) != nil {
		t.Fatalf("%s: status %s, stdout %q", how, status, stdout)
	}
	if len(seen.Args) != 0 || seen.Main != "file://"+file || len(seen.Argv) != 1 || seen.Argv[0] != file {
		t.Errorf("%s: Deno.args %q, Deno.mainModule %q, process.argv[1:] %q; want [], file://%s and [%s], as `deno run` gives a script",
			how, seen.Args, seen.Main, seen.Argv, file, file)
	}
	if len(seen.Worker) != 2 || len(seen.Worker[0]) != 0 || len(seen.Worker[1]) != 0 {
		t.Errorf("%s: a Worker's Deno.args and process.argv.slice(2) %q; want none", how, seen.Worker)
	}
}

// TestGuestStartedAsScript: a program sees itself started as `deno run
// /job/main.js` starts it, cold and warm: no arguments, not the job's path
// (a CLI program parsing Deno.args or process.argv.slice(2) took it for
// one), and its own file as the main module, not pmjail's bootstrap.
func TestGuestStartedAsScript(t *testing.T) {
	for _, name := range []string{"main.js", "main.ts"} {
		r := runScript(t, name, startProbe)
		checkStart(t, "cold "+name, r.Status, r.Stdout, "/job/"+name)
	}
	d := startDaemon(t, daemonDir(t), warmConfig)
	res := warmRun(t, d, &api.Job{Runtime: "deno", Source: startProbe})
	checkStart(t, "warm", string(res.Status), res.Stdout, "/job/main.js")
}

// TestDaemonWarmImportMeta: a program that reads import.meta gets the
// same answer from a daemon as from `pmjail run`: a warm runtime's module
// is a blob: URL (import.meta.url blob:…, filename and dirname
// undefined), so such a program runs cold, and says why.
func TestDaemonWarmImportMeta(t *testing.T) {
	const src = "console.log(import.meta.url, import.meta.filename, import.meta.dirname);\n"
	const want = "file:///job/main.js /job/main.js /job\n"
	if r := runScript(t, "main.js", src); r.Status != "ok" || r.Stdout != want {
		t.Fatalf("cold: status %s, stdout %q; want %q", r.Status, r.Stdout, want)
	}
	d := startDaemon(t, daemonDir(t), warmConfig)
	// A run the pool could serve: the template is known, a runtime idle.
	warmRun(t, d, &api.Job{Runtime: "deno", Source: "console.log(1)"})
	res := offeredRun(t, d, &api.Job{Runtime: "deno", Source: src})
	if res.Status != "ok" || res.Stdout != want {
		t.Errorf("daemon: status %s, stdout %q (warm %v); want %q, as a cold run prints", res.Status, res.Stdout, res.Warm, want)
	}
	if res.Warm || !strings.Contains(res.WarmReason, "import.meta") {
		t.Errorf("daemon: warm %v, reason %q; want cold, the reason naming import.meta", res.Warm, res.WarmReason)
	}
}

// TestGuestDefaultClassIsScript: a module whose default export is a class
// is a script, as `deno run` runs it (a class cannot be called, so it is
// no handler): it used to end as a TypeError, "Class constructor Stack
// cannot be invoked without 'new'", cold and warm.
func TestGuestDefaultClassIsScript(t *testing.T) {
	const src = `export default class Stack {
  #items: number[] = [];
  push(x: number) { this.#items.push(x); return this; }
  peek() { return this.#items.at(-1); }
}
console.log(new Stack().push(1).push(2).peek());
`
	if r := runScript(t, "main.ts", src); r.Status != "ok" || r.Stdout != "2\n" || r.Value != nil {
		t.Errorf("cold: status %s, stdout %q, value %s, error %+v; want ok, 2, no value", r.Status, r.Stdout, r.Value, r.Error)
	}
	d := startDaemon(t, daemonDir(t), warmConfig)
	res := offeredRun(t, d, &api.Job{Runtime: "typescript", Source: src})
	if res.Status != "ok" || res.Stdout != "2\n" || res.Value != nil {
		t.Errorf("daemon (warm %v): status %s, stdout %q, value %s, error %+v; want ok, 2, no value", res.Warm, res.Status, res.Stdout, res.Value, res.Error)
	}
	// A handler still is one.
	if r := runScript(t, "main.ts", "export default (n: number) => n * 2;\n", "--input", "21"); r.Status != "ok" || string(r.Value) != "42" {
		t.Errorf("handler: status %s, value %s; want ok 42", r.Status, r.Value)
	}
}
