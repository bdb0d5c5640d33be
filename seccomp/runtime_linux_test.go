package seccomp_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/seccomp"
	"github.com/pmjail/pmjail/seccomp/bpf"
)

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(here), "..", rel)
	_, err := os.Stat(p)
	testenv.Need(t, err == nil, rel+" (run `npm ci` in the repository)")
	return p
}

// runUnder execs cmd in a child under prog (with Notify, so any call the
// profile lacks is named) and returns its stdout and the denials.
func runUnder(t *testing.T, prog *bpf.Program, cmd ...string) (string, map[string]uint64) {
	t.Helper()
	ctx := testContext(t)
	env := []string{"DENO_DIR=" + t.TempDir(), "DENO_NO_UPDATE_CHECK=1", "NO_COLOR=1"}
	c := startChild(t, ctx, "exec", prog, env, cmd...)
	var counts map[string]uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		counts = seccomp.Serve(ctx, c.listener).Counts()
	}()
	err := c.cmd.Wait()
	wg.Wait()
	if err != nil {
		t.Fatalf("%v: %v (denied: %v)\nstdout:\n%s\nstderr:\n%s", cmd, err, counts, c.stdout.String(), c.stderr.String())
	}
	return c.stdout.String(), counts
}

var denoScripts = map[string]struct{ src, want string }{
	"json.js":  {`const o = JSON.parse(JSON.stringify({a: [1, 2, {b: "c"}]})); console.log(o.a[2].b);`, "c"},
	"regex.js": {`console.log("2026-11-22".replace(/(\d+)-(\d+)-(\d+)/u, "$3/$2/$1"));`, "22/11/2026"},
	"crypto.js": {`const d = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode("abc")));
console.log([...d.slice(0, 4)].map((x) => x.toString(16).padStart(2, "0")).join(""));`, "ba7816bf"},
	"timers.js": {`let n = 0; await new Promise((r) => { const id = setInterval(() => { if (++n === 3) { clearInterval(id); r(); } }, 5); });
await new Promise((r) => setTimeout(r, 10)); console.log("ticks", n);`, "ticks 3"},
	"bigarray.js": {`const a = new Float64Array(20_000_000).fill(2); const b = Array.from({length: 1_000_000}, (_, i) => i);
console.log(a.reduce((x, y) => x + y, 0), b.length);`, "40000000 1000000"},
	"async.js": {`const v = await Promise.all([1, 2, 3].map(async (x) => { await null; return x * x; })); console.log(v.join("+"));`, "1+4+9"},
	"typed.ts": {`interface P { x: number } const f = (p: P): number => p.x * 2; console.log("ts", f({ x: 21 }));`, "ts 42"},
	"wasm.js": {`const m = await WebAssembly.instantiate(new Uint8Array([0,97,115,109,1,0,0,0,1,7,1,96,2,127,127,1,127,3,2,1,0,7,7,1,3,97,100,100,0,0,10,9,1,7,0,32,0,32,1,106,11]));
console.log("wasm", m.instance.exports.add(2, 3));`, "wasm 5"},
}

func TestDenoUnderProfile(t *testing.T) {
	testenv.RequireRoot(t)
	deno := repoFile(t, "node_modules/@deno/linux-x64-glibc/deno")
	prog := compile(t, builtin(t, "deno"), seccomp.Options{Notify: true})
	dir := t.TempDir()
	for name, sc := range denoScripts {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(sc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			out, denied := runUnder(t, prog, deno, "run", "--no-prompt", "--no-config", path)
			if strings.TrimSpace(out) != sc.want {
				t.Errorf("output %q, want %q", out, sc.want)
			}
			if len(denied) > 0 {
				t.Errorf("the deno profile denied calls Deno makes: %v", denied)
			}
		})
	}
}

func TestPyodideUnderProfile(t *testing.T) {
	testenv.RequireRoot(t)
	deno := repoFile(t, "node_modules/@deno/linux-x64-glibc/deno")
	pyodide := repoFile(t, "node_modules/pyodide")
	loader := filepath.Join(t.TempDir(), "load.mjs")
	src := `const { loadPyodide } = await import(Deno.args[0] + "/pyodide.mjs");
const py = await loadPyodide({ indexURL: Deno.args[0] + "/" });
py.runPython("import json, re, random; print(json.dumps({'n': len(re.findall('a', 'banana'))}))");`
	if err := os.WriteFile(loader, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := compile(t, builtin(t, "pyodide"), seccomp.Options{Notify: true})
	out, denied := runUnder(t, prog, deno, "run", "--no-prompt", "--no-config", "--allow-read="+pyodide, loader, pyodide)
	if strings.TrimSpace(out) != `{"n": 3}` {
		t.Errorf("output %q, want {\"n\": 3}", out)
	}
	if len(denied) > 0 {
		t.Errorf("the pyodide profile denied calls Pyodide makes: %v", denied)
	}
}
