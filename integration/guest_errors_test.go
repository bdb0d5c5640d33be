package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// pmjailPath matches anything of pmjail's own a guest's author must not
// see in a result: the bootstrap and channel in the jail, the Python
// bootstrap and loader, and Deno's built-in modules.
var pmjailPath = regexp.MustCompile(`/pmjail/|bootstrap\.(js|py)|channel\.js|report\.js|loader\.mjs|_pmjail_boot|ext:[a-z_]+/`)

// guestError is a result's error as the tests compare it: everything but
// the stack, whose lines are checked on their own.
type guestError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Stack   string          `json:"stack,omitempty"`
	Value   json.RawMessage `json:"value,omitempty"`
	Cause   *guestError     `json:"cause,omitempty"`
}

type guestResult struct {
	Status    string          `json:"status"`
	Value     json.RawMessage `json:"value"`
	Error     *guestError     `json:"error"`
	Truncated map[string]bool `json:"truncated"`
	Logs      []json.RawMessage
}

// runGuest runs source as the file name with `pmjail run --json` and
// returns the result, having checked that nothing in the whole of it
// names pmjail's own files.
func runGuest(t *testing.T, name, source string, flags ...string) *guestResult {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"run", "--json"}, flags...), path)
	inv := pmjailCmd(t, "", args...)
	var r guestResult
	if err := json.Unmarshal([]byte(inv.Stdout), &r); err != nil {
		t.Fatalf("pmjail %v: no result (exit %d): %v\nstderr: %s", args, inv.ExitCode, err, inv.Stderr)
	}
	// The posture names pmjail's own paths by design; everything else is
	// the guest's.
	var whole map[string]json.RawMessage
	_ = json.Unmarshal([]byte(inv.Stdout), &whole)
	delete(whole, "posture")
	for k, v := range whole {
		if m := pmjailPath.Find(v); m != nil {
			t.Errorf("%s: the result's %s names pmjail's own %q: %s", name, k, m, v)
		}
	}
	return &r
}

// compact is raw without insignificant space, for comparing.
func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// wantError checks a result's error field by field, the stack by what it
// must contain.
func wantError(t *testing.T, name string, r *guestResult, want guestError, stackHas ...string) {
	t.Helper()
	if r.Status != "error" || r.Error == nil {
		t.Errorf("%s: status %s error %+v, want error %q", name, r.Status, r.Error, want.Message)
		return
	}
	got := *r.Error
	for _, s := range stackHas {
		if !strings.Contains(got.Stack, s) {
			t.Errorf("%s: stack lacks %q:\n%s", name, s, got.Stack)
		}
	}
	if len(stackHas) > 0 || want.Stack == "" {
		got.Stack = ""
	}
	for g, w := &got, &want; g != nil && w != nil; g, w = g.Cause, w.Cause {
		g.Value, w.Value = json.RawMessage(compact(g.Value)), json.RawMessage(compact(w.Value))
		if g.Cause != nil && w.Cause != nil {
			g.Cause.Stack = w.Cause.Stack
		}
	}
	if !reflect.DeepEqual(got, want) {
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		t.Errorf("%s: error\n got %s\nwant %s", name, gb, wb)
	}
}

const valueOK = "the returned value cannot be sent as JSON: "

// TestGuestErrorsJS: what a Deno guest's author sees when their code
// fails, with the exact messages.
func TestGuestErrorsJS(t *testing.T) {
	cases := []struct {
		name, file, src string
		want            guestError
		stack           []string
	}{
		{"syntax error", "main.js", "export default (i) => {\n  let x = ;\n}\n",
			guestError{Code: "SyntaxError", Message: "Expression expected at file:///job/main.js:2:11"},
			[]string{"SyntaxError: Expression expected\n", "2 |   let x = ;", "    at file:///job/main.js:2:11"}},
		{"syntax error in TypeScript", "main.ts", "const n: number = 1;\nif (n) {\n",
			guestError{Code: "SyntaxError", Message: "Expected '}', got '<eof>' at file:///job/main.ts:2:9"},
			[]string{"2 | if (n) {", "at file:///job/main.ts:2:9"}},
		{"thrown object", "main.js", "export default () => { throw {code: 42}; };\n",
			guestError{Code: "ThrownValue", Message: `threw a non-Error value: {"code":42}`, Value: json.RawMessage(`{"code":42}`)}, nil},
		{"thrown string", "main.js", "throw 'boom';\n",
			guestError{Code: "ThrownValue", Message: `threw a non-Error value: "boom"`, Value: json.RawMessage(`"boom"`)}, nil},
		{"error with code and cause", "main.js",
			"export default () => {\n  const e = new Error('outer', { cause: new TypeError('inner') });\n  e.code = 'E_OUTER';\n  throw e;\n};\n",
			guestError{Code: "Error", Message: "outer", Value: json.RawMessage(`{"code":"E_OUTER"}`),
				Cause: &guestError{Code: "TypeError", Message: "inner"}},
			[]string{"Error: outer\n    at Module.default (file:///job/main.js:2:13)"}},
		{"function in the value", "main.js", "export default () => ({ items: [1, 2, () => 3] });\n",
			guestError{Code: "ResultError", Message: valueOK + "value.items[2] is a function"}, nil},
		{"cycle in the value", "main.js", "export default () => { const a = { b: {} }; a.b.a = a; return a; };\n",
			guestError{Code: "ResultError", Message: valueOK + "value.b.a refers back to an enclosing object (a cycle)"}, nil},
		{"BigInt in the value", "main.js", "export default () => ({ 'odd key': 1n });\n",
			guestError{Code: "ResultError", Message: valueOK + `value["odd key"] is a BigInt (convert it to a string or a number)`}, nil},
		{"Map in the value", "main.js", "export default () => ({ m: new Map() });\n",
			guestError{Code: "ResultError", Message: valueOK + "value.m is a Map (use Object.fromEntries(map))"}, nil},
		{"Set in the value", "main.js", "export default () => [new Set([1])];\n",
			guestError{Code: "ResultError", Message: valueOK + "value[0] is a Set (use [...set])"}, nil},
		{"NaN in the value", "main.js", "export default () => ({ n: 0 / 0 });\n",
			guestError{Code: "ResultError", Message: valueOK + "value.n is NaN, which JSON cannot hold"}, nil},
		{"symbol as the value", "main.js", "export default () => Symbol('s');\n",
			guestError{Code: "ResultError", Message: valueOK + "value is a symbol"}, nil},
		// JSON.stringify turns these into {}: a value that came back
		// from JSON changed, silently.
		{"Response as the value", "main.js", "export default () => new Response('hello');\n",
			guestError{Code: "ResultError", Message: valueOK + "value is a Response, which JSON turns into {} (return await response.json() or .text())"}, nil},
		{"Headers in the value", "main.js", "export default () => ({ h: new Headers({ a: '1' }) });\n",
			guestError{Code: "ResultError", Message: valueOK + "value.h is a Headers, which JSON turns into {} (use Object.fromEntries(headers))"}, nil},
		{"generator as the value", "main.js", "export default () => (function* () { yield 1; })();\n",
			guestError{Code: "ResultError", Message: valueOK + "value is a Generator, which JSON turns into {} (use [...generator])"}, nil},
		{"getters only in the value", "main.js", "class Point { get x() { return 1; } }\nexport default () => [new Point()];\n",
			guestError{Code: "ResultError", Message: valueOK + "value[0] is a Point, which JSON turns into {}"}, nil},
		{"thrown inside pmjail's own code", "main.js", "export default async (i, ctx) => {\n  await ctx.host.log.info({ toString() { throw new RangeError('bad toString'); } });\n};\n",
			guestError{Code: "RangeError", Message: "bad toString"},
			[]string{"RangeError: bad toString\n    at Object.toString (file:///job/main.js:2:48)", "at Module.default (file:///job/main.js:2:22)"}},
		{"value over the frame cap", "main.js", "export default () => 'x'.repeat(5 << 20);\n",
			guestError{Code: "ResultError", Message: "the returned value is 5242882 bytes as JSON, over the 4194280-byte limit on a result's value"}, nil},
		{"value over the frame cap as the result holds it", "main.js", "export default () => '<'.repeat(1 << 20);\n",
			guestError{Code: "ResultError", Message: "the returned value is 6291458 bytes as JSON, over the 4194280-byte limit on a result's value"}, nil},
		{"promise that never settles", "main.js", "export default async () => { await new Promise(() => {}); };\n",
			guestError{Code: "UnsettledPromise", Message: "the handler's promise never settled: file:///job/main.js's default export was still awaiting when nothing (no timer, I/O or broker call) was left to settle it"}, nil},
		{"top-level await that never settles", "main.js", "console.log('waiting');\nawait new Promise(() => {});\n",
			guestError{Code: "UnsettledPromise", Message: "the script's top-level await never settled at file:///job/main.js:2:1: nothing (no timer, I/O or broker call) was left to settle it"},
			[]string{"Top-level await promise never resolved\nawait new Promise(() => {});"}},
	}
	for _, c := range cases {
		r := runGuest(t, c.file, c.src)
		wantError(t, c.name, r, c.want, c.stack...)
	}

	// undefined is no value at all, not null.
	if r := runGuest(t, "main.js", "export default () => undefined;\n"); r.Status != "ok" || r.Value != nil {
		t.Errorf("undefined: status %s value %s, want ok and no value", r.Status, r.Value)
	}
	// An instance of a class is its own fields, as JSON has them, and one
	// with none and nothing else to lose is {}.
	if r := runGuest(t, "main.js", "class P { constructor() { this.x = 1; } get y() { return 2; } }\nclass E {}\nexport default () => [new P(), new E()];\n"); r.Status != "ok" || compact(r.Value) != `[{"x":1},{}]` {
		t.Errorf("class instances: status %s value %s error %+v", r.Status, r.Value, r.Error)
	}
	// A Date is its toJSON, an undefined property is left out: JSON's
	// own rules, which round-trip.
	if r := runGuest(t, "main.js", "export default () => ({ d: new Date(0), u: undefined });\n"); r.Status != "ok" || compact(r.Value) != `{"d":"1970-01-01T00:00:00.000Z"}` {
		t.Errorf("date: status %s value %s error %+v", r.Status, r.Value, r.Error)
	}
}

// TestGuestUnhandledRejection: an unhandled rejection ends the run as
// an error whatever its timing.
func TestGuestUnhandledRejection(t *testing.T) {
	cases := []struct{ name, src, message, at string }{
		{"handler, left pending as it returns", "export default () => { Promise.reject(new Error('r1')); return 1; };\n", "r1", "main.js:1:39"},
		{"handler, after an await", "export default async () => { await null; Promise.reject(new Error('r2')); return 1; };\n", "r2", "main.js:1:57"},
		{"handler, in a timer while it waits", "export default async () => {\n  setTimeout(() => Promise.reject(new Error('r3')), 1);\n  await new Promise((r) => setTimeout(r, 50));\n  return 1;\n};\n", "r3", "main.js:2:35"},
		{"plain script, last statement", "console.log('x');\nPromise.reject(new Error('r4'));\n", "r4", "main.js:2:16"},
		{"plain script, after the module finished", "await null;\nqueueMicrotask(() => Promise.reject(new Error('r5')));\n", "r5", "main.js:2:37"},
		{"plain script, in a timer", "setTimeout(() => Promise.reject(new Error('r6')), 5);\n", "r6", "main.js:1:33"},
		{"plain script, just before exit", "setTimeout(() => { Promise.reject(new Error('r7')); }, 0);\n", "r7", "main.js:1:35"},
	}
	for _, c := range cases {
		r := runGuest(t, "main.js", c.src)
		wantError(t, c.name, r, guestError{Code: "Error", Message: c.message}, "Error: "+c.message+"\n", "file:///job/"+c.at)
	}
}

// TestGuestHandledErrors: an error or rejection the guest's own listener
// handles, as `deno run` lets it (preventDefault on the global's "error"
// or "unhandledrejection" event, or node:process's uncaughtException and
// unhandledRejection listeners), does not end the run: the program goes
// on, as it would on its own. One the guest's listener sees but does not
// handle still ends it.
func TestGuestHandledErrors(t *testing.T) {
	alive := "setTimeout(() => console.log('alive'), 20);\n"
	cases := []struct{ name, src, stdout, value string }{
		{"unhandledrejection prevented", "addEventListener('unhandledrejection', (e) => { e.preventDefault(); console.log('handled', e.reason.message); });\nPromise.reject(new Error('r'));\n" + alive,
			"handled r\nalive\n", ""},
		{"onunhandledrejection prevented", "globalThis.onunhandledrejection = (e) => { e.preventDefault(); console.log('handled', e.reason.message); };\nPromise.reject(new Error('r'));\n" + alive,
			"handled r\nalive\n", ""},
		{"error event prevented", "addEventListener('error', (e) => { e.preventDefault(); console.log('handled', e.error.message); });\nsetTimeout(() => { throw new Error('t'); }, 1);\n" + alive,
			"handled t\nalive\n", ""},
		{"returnValue false", "addEventListener('error', (e) => { e.returnValue = false; console.log('handled', e.error.message); });\nsetTimeout(() => { throw new Error('t'); }, 1);\n" + alive,
			"handled t\nalive\n", ""},
		{"node:process unhandledRejection", "import process from 'node:process';\nprocess.on('unhandledRejection', (r) => console.log('handled', r.message));\nPromise.reject(new Error('r'));\n" + alive,
			"handled r\nalive\n", ""},
		{"node:process uncaughtException", "process.on('uncaughtException', (e) => console.log('handled', e.message));\nsetTimeout(() => { throw new Error('t'); }, 1);\n" + alive,
			"handled t\nalive\n", ""},
		{"handler goes on", "addEventListener('unhandledrejection', (e) => e.preventDefault());\nexport default async () => {\n  Promise.reject(new Error('bg'));\n  await new Promise((r) => setTimeout(r, 10));\n  return 'fine';\n};\n",
			"", `"fine"`},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "main.js")
		if err := os.WriteFile(path, []byte(c.src), 0o644); err != nil {
			t.Fatal(err)
		}
		inv := pmjailCmd(t, "", "run", "--json", path)
		r := inv.Result
		if r == nil {
			t.Fatalf("%s: no result (exit %d): %s", c.name, inv.ExitCode, inv.Stderr)
		}
		if r.Status != "ok" || r.Stdout != c.stdout || compact(r.Value) != c.value {
			t.Errorf("%s: status %s stdout %q value %s error %+v, want ok, stdout %q, value %s", c.name, r.Status, r.Stdout, r.Value, r.Error, c.stdout, c.value)
		}
	}
	// A listener that only looks does not handle it.
	r := runGuest(t, "main.js", "addEventListener('unhandledrejection', (e) => console.log('seen', e.reason.message));\nPromise.reject(new Error('r'));\n"+alive)
	wantError(t, "a listener that does not prevent", r, guestError{Code: "Error", Message: "r"}, "file:///job/main.js:2:16")
}

// TestGuestErrorsPython: the same for a Python guest.
func TestGuestErrorsPython(t *testing.T) {
	cases := []struct {
		name, src string
		want      guestError
		stack     []string
	}{
		{"syntax error", "x = 1\nif x\n",
			guestError{Code: "SyntaxError", Message: "expected ':' at /job/main.py:2:5"},
			[]string{"File \"/job/main.py\", line 2\n    if x\n"}},
		{"main that is not callable", "main = 5\n",
			guestError{Code: "TypeError", Message: "main is an int, not a function: a handler script defines def main(input) or def main(input, ctx)"}, nil},
		{"set in the value", "def main(input):\n    return {'items': [1, 2, {3}]}\n",
			guestError{Code: "ResultError", Message: valueOK + "value.items[2] is a set (use a list)"}, nil},
		{"non-string key", "def main(input):\n    return {1: 'a'}\n",
			guestError{Code: "ResultError", Message: valueOK + `value has the key 1, which is not a string (JSON would make it "1")`}, nil},
		{"integer too large to cross exactly", "def main(input):\n    return {'n': 2**64}\n",
			guestError{Code: "ResultError", Message: valueOK + "value.n is 18446744073709551616, beyond the integers JSON carries exactly here (use a string)"}, nil},
		{"nan in the value", "def main(input):\n    return [float('nan')]\n",
			guestError{Code: "ResultError", Message: valueOK + "value[0] is nan, which JSON cannot hold"}, nil},
		{"cycle in the value", "def main(input):\n    a = []\n    a.append(a)\n    return a\n",
			guestError{Code: "ResultError", Message: valueOK + "value[0] refers back to value (a cycle)"}, nil},
		{"value over the frame cap", "def main(input):\n    return 'x' * (5 << 20)\n",
			guestError{Code: "ResultError", Message: "the returned value is 5242882 bytes as JSON, over the 4194280-byte limit on a result's value"}, nil},
		{"exception with a long message and value", "def main(input):\n    e = ValueError('x' * 3000000)\n    e.code = 'y' * 100000\n    raise e\n",
			guestError{Code: "ValueError", Message: strings.Repeat("x", 8<<10) + "…[truncated]"}, []string{"File \"/job/main.py\", line 4, in main"}},
		{"value over the frame cap as the result holds it", "def main(input):\n    return '<' * (1 << 20)\n",
			guestError{Code: "ResultError", Message: "the returned value is 6291458 bytes as JSON, over the 4194280-byte limit on a result's value"}, nil},
		// Python writes 1e+20 where the frame holds 21 digits: measured in
		// Python's text, this passed and ended the run as a protocol error.
		{"value over the frame cap as JavaScript writes it", "def main(input):\n    return [1e20] * 300000\n",
			guestError{Code: "ResultError", Message: "the returned value is 6600001 bytes as JSON, over the 4194280-byte limit on a result's value"}, nil},
		{"value far over the frame cap", "def main(input):\n    return 'x' * (13 << 20)\n",
			guestError{Code: "ResultError", Message: "the returned value is at least 4543830 bytes as JSON, over the 4194280-byte limit on a result's value"}, nil},
		{"exception of a long class name", "def main(input):\n    raise type('E' * 300000, (Exception,), {})('boom')\n",
			guestError{Code: strings.Repeat("E", 128) + "…[truncated]", Message: "boom"}, nil},
		{"exception with a code and a cause", "class Failed(Exception):\n    pass\n\ndef main(input, ctx):\n    try:\n        {}['k']\n    except KeyError as k:\n        e = Failed('outer')\n        e.code = 'E_OUTER'\n        raise e from k\n",
			guestError{Code: "Failed", Message: "outer", Value: json.RawMessage(`{"code":"E_OUTER"}`), Cause: &guestError{Code: "KeyError", Message: "'k'"}},
			[]string{"File \"/job/main.py\", line 10, in main", "File \"/job/main.py\", line 6, in main"}},
		{"exception raised through pmjail's own code", "import pmjail\n\nclass X:\n    def __str__(self):\n        raise ValueError('bad str')\n\ndef main(input):\n    pmjail.log.info(X())\n",
			guestError{Code: "ValueError", Message: "bad str"},
			[]string{"File \"/job/main.py\", line 8, in main", "File \"/job/main.py\", line 5, in __str__"}},
		{"coroutine that never finishes", "import asyncio\n\nasync def wait():\n    await asyncio.Future()\n\nasync def main(input):\n    await wait()\n",
			guestError{Code: "UnsettledPromise", Message: "the Python program never finished: the await at /job/main.py:4 was waiting for something that nothing (no timer, I/O or broker call) was left to settle"}, nil},
		{"exception inside a broker call", "import pmjail\n\ndef main(input):\n    pmjail.log.info('x', meta={'s': {1}})\n",
			guestError{Code: "TypeError", Message: "Object of type set is not JSON serializable"},
			[]string{"File \"/job/main.py\", line 4, in main"}},
	}
	for _, c := range cases {
		r := runGuest(t, "main.py", c.src, "--cap", "log")
		wantError(t, c.name, r, c.want, c.stack...)
	}
	// A value within the frame cap as the frame holds it is the result,
	// whatever Python's own text of it (é as \u00e9, six bytes for two).
	if r := runGuest(t, "main.py", "def main(input):\n    return 'é' * (1 << 20) + '😀' * (1 << 18)\n"); r.Status != "ok" || len(r.Value) != 3<<20+2 {
		t.Errorf("a value of 3 MiB in UTF-8: status %s, %d bytes of value, error %+v", r.Status, len(r.Value), r.Error)
	}
	// def main(input) is called with the input alone.
	if r := runGuest(t, "main.py", "def main(input):\n    return {'got': input}\n", "--input", `{"a":1}`); r.Status != "ok" || compact(r.Value) != `{"got":{"a":1}}` {
		t.Errorf("main(input): status %s value %s error %+v", r.Status, r.Value, r.Error)
	}
}

// TestGuestLogBudget: a run whose logs hit the budget says so.
func TestGuestLogBudget(t *testing.T) {
	// 8 KiB messages (the longest kept whole) fill the 1 MiB budget after
	// 127.
	r := runGuest(t, "main.js", "for (let i = 0; i < 140; i++) host.log.info('x'.repeat(8192));\n", "--cap", "log")
	if r.Status != "ok" || len(r.Logs) != 128 || !r.Truncated["logs"] {
		t.Errorf("140 × 8 KiB of logs: status %s, %d logs, truncated %v; want ok, 128, logs true", r.Status, len(r.Logs), r.Truncated)
	}
	r = runGuest(t, "main.js", "host.log.info('one');\n", "--cap", "log")
	if r.Truncated["logs"] {
		t.Errorf("one log: truncated %v", r.Truncated)
	}
}

// TestGuestTypeCheck: TypeScript is type-stripped unless the job asks for
// Deno's checker, which then runs in the jail, offline, and reports type
// errors with their locations.
func TestGuestTypeCheck(t *testing.T) {
	src := "const n: number = 'one';\nconst s: string = 2;\nexport default (input: { k: number }): number => input.k;\n"
	if r := runGuest(t, "main.ts", src, "--input", `{"k":7}`); r.Status != "ok" || compact(r.Value) != "7" {
		t.Errorf("without --check: status %s value %s error %+v, want ok 7", r.Status, r.Value, r.Error)
	}
	r := runGuest(t, "main.ts", src, "--check", "--input", `{"k":7}`)
	wantError(t, "type errors", r, guestError{Code: "TypeError", Message: "Type 'string' is not assignable to type 'number'. at file:///job/main.ts:1:7 (and 1 more)"},
		"TS2322 [ERROR]: Type 'string' is not assignable to type 'number'.", "at file:///job/main.ts:2:7", "Found 2 errors.")
	if r := runGuest(t, "main.ts", "export default (input: { k: number }): number => input.k * 2;\n", "--check", "--input", `{"k":7}`); r.Status != "ok" || compact(r.Value) != "14" {
		t.Errorf("a program that checks: status %s value %s error %+v, want ok 14", r.Status, r.Value, r.Error)
	}
}

// TestGuestErrorsThroughTheDaemon: the error's value and cause, and a
// type check, cross the socket API as they come from the CLI.
func TestGuestErrorsThroughTheDaemon(t *testing.T) {
	dir := daemonDir(t)
	d := startDaemon(t, dir, fmt.Sprintf(baseConfig, 1, 4, "0660"))
	submit := func(name, src string, flags ...string) *guestResult {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		inv := pmjailCmd(t, "", append(append([]string{"submit", "--socket", d.sock, "--json"}, flags...), path)...)
		var r guestResult
		if err := json.Unmarshal([]byte(inv.Stdout), &r); err != nil {
			t.Fatalf("submit %s: no result (exit %d): %v\n%s", name, inv.ExitCode, err, inv.Stderr)
		}
		return &r
	}
	r := submit("cause.js", "const e = new Error('outer', { cause: { code: 42 } });\ne.code = 'E_OUTER';\nthrow e;\n")
	wantError(t, "through the daemon", r, guestError{Code: "Error", Message: "outer", Value: json.RawMessage(`{"code":"E_OUTER"}`),
		Cause: &guestError{Code: "ThrownValue", Message: `threw a non-Error value: {"code":42}`, Value: json.RawMessage(`{"code":42}`)}},
		"at file:///job/main.js:1:11")
	r = submit("typed.ts", "const n: number = 'one';\nconsole.log(n);\n", "--check")
	wantError(t, "type check through the daemon", r, guestError{Code: "TypeError", Message: "Type 'string' is not assignable to type 'number'. at file:///job/main.ts:1:7"},
		"TS2322 [ERROR]")
}

// TestGuestErrorInheritedCause: a guest that puts a cause getter on
// Object.prototype (one that hands out a new object every time) before it
// throws gets its error reported, not a bootstrap walking an endless
// chain of causes until the wall limit: only an error's own cause counts.
func TestGuestErrorInheritedCause(t *testing.T) {
	src := "export default () => {\n  Object.defineProperty(Object.prototype, 'cause', { get() { return { message: 'm' }; }, configurable: true });\n  throw new Error('proto cause');\n};\n"
	r := runGuest(t, "main.js", src, "--timeout", "20s")
	if r.Status != "error" || r.Error == nil || r.Error.Code != "Error" || r.Error.Message != "proto cause" {
		t.Fatalf("status %s error %+v, want error \"proto cause\"", r.Status, r.Error)
	}
}
