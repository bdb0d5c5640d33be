package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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

// TestPythonMainWithoutInput: Python's most common script shape, a main
// that takes nothing, called under `if __name__ == "__main__":`, runs as
// python runs it. pmjail used to call that main again as a handler, and
// the run ended as a TypeError ("main() takes 0 positional arguments but
// 2 were given") after the script's own output. A main that takes the
// input is still the handler.
func TestPythonMainWithoutInput(t *testing.T) {
	const script = "def main():\n    print(\"hello from main\")\n\nif __name__ == \"__main__\":\n    main()\n"
	cases := []struct {
		name, source, stdout, value string
	}{
		{"guarded", script, "hello from main\n", ""},
		{"async", "import asyncio\n\nasync def main():\n    await asyncio.sleep(0)\n    print(\"async main\")\n\nif __name__ == \"__main__\":\n    asyncio.run(main())\n", "async main\n", ""},
		{"method", "class App:\n    def main(self):\n        print(\"method\")\n\nmain = App().main\nmain()\n", "method\n", ""},
		{"handler", "def main(input):\n    return input * 2\n", "", "42"},
		{"handler ctx", "def main(input, ctx):\n    return ctx.input + input\n", "", "42"},
		{"varargs", "def main(*args):\n    return len(args)\n", "", "2"},
	}
	for _, tc := range cases {
		r := runScript(t, "main.py", tc.source, "--input", "21")
		if r.Status != "ok" || r.Stdout != tc.stdout || string(r.Value) != tc.value {
			t.Errorf("%s: status %s, stdout %q, value %s, error %+v; want ok, %q, value %q", tc.name, r.Status, r.Stdout, r.Value, r.Error, tc.stdout, tc.value)
		}
	}
	d := startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 2, "max_queue": 4, "socket": {"mode": "0660"}, "prestart": -1, "warm": {"deno": 0, "python": 1}}`)
	// Served warm where it can be: a run that went cold for want of an
	// idle runtime of its template is tried again.
	var res *api.Result
	for try := 0; ; try++ {
		deadline := time.Now().Add(60 * time.Second)
		for h, err := d.c.Health(context.Background()); err != nil || h.Warm == nil || h.Warm.Idle["python"] == 0; h, err = d.c.Health(context.Background()) {
			if time.Now().After(deadline) {
				t.Fatalf("no warm python runtime became idle within 60s: %+v %v\n%s", h, err, d.logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		var err error
		if res, err = d.c.Run(context.Background(), &api.Job{Runtime: "python", Source: script}); err != nil {
			t.Fatal(err)
		}
		if res.Warm || try == 10 || !transientCold(res.WarmReason) {
			break
		}
	}
	if res.Status != "ok" || res.Stdout != "hello from main\n" {
		t.Errorf("daemon (warm %v %q): status %s, stdout %q, error %+v; want ok and main's line once", res.Warm, res.WarmReason, res.Status, res.Stdout, res.Error)
	}
}

// TestPythonEntryReadOnly: the job's entry is read-only to Python, as
// its other files are (docs/guest-api.md: writing to a job file fails
// with PermissionError): the bootstrap wrote its copy of main.py writable,
// and a script could overwrite it.
func TestPythonEntryReadOnly(t *testing.T) {
	const src = "try:\n    open(\"main.py\", \"w\").write(\"x\")\n    print(\"written\")\nexcept PermissionError:\n    print(\"read-only\")\nprint(open(\"main.py\").read()[:3])\n"
	if r := runScript(t, "main.py", src); r.Status != "ok" || r.Stdout != "read-only\ntry\n" {
		t.Errorf("status %s, stdout %q, error %+v; want read-only, and the file as it was", r.Status, r.Stdout, r.Error)
	}
}
