package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
)

// tsxHandler is a TSX handler with a JSX factory of its own (`deno run`
// without a config uses the classic transform) and the JSX types a type
// check needs; with "fail" in its input it throws on line 13.
const tsxHandler = `/** @jsx h */
declare global {
  namespace JSX {
    interface Element { tag: string; children: unknown[] }
    interface IntrinsicElements { [tag: string]: Record<string, unknown> }
  }
}
function h(tag: string, _props: unknown, ...children: unknown[]): JSX.Element {
  return { tag, children };
}
const html = (n: unknown): string => typeof n === "object" && n !== null ? "<" + (n as JSX.Element).tag + ">" + (n as JSX.Element).children.map(html).join("") + "</" + (n as JSX.Element).tag + ">" : String(n);
export default (input: { name: string; fail?: boolean }) => {
  if (input.fail) throw new Error("no " + input.name);
  return html(<p>hello, <b>{input.name}</b></p>);
};
`

// jsxHandler is the same in JSX: no types, and it throws on line 4.
const jsxHandler = `/** @jsx h */
const h = (tag, _props, ...children) => "<" + tag + ">" + children.join("") + "</" + tag + ">";
export default (input) => {
  if (input.fail) throw new Error("no " + input.name);
  return <p>hello, <b>{input.name}</b></p>;
};
`

// jsxValue is the handlers' value for the input {"name":"ada"}, as
// compact gives it.
var jsxValue = compact(json.RawMessage(`"<p>hello, <b>ada</b></p>"`))

// TestJSXEntries: a .jsx or .tsx program runs everywhere a .js or .ts one
// does: from the CLI by its extension (a file, a directory's main.tsx),
// through the socket API as runtime "jsx" or "tsx" (one file, cold and on
// a warm runtime, whose blob's media type must say the dialect) or as the
// entry of files, type-checked, and an error it throws names the job's
// file and line in every one of them.
func TestJSXEntries(t *testing.T) {
	dialects := []struct {
		runtime, source string
		line            string // where the error is thrown: file:///job/main.EXT:LINE:
	}{
		{"tsx", tsxHandler, "file:///job/main.tsx:13:"},
		{"jsx", jsxHandler, "file:///job/main.jsx:4:"},
	}
	t.Run("cli", func(t *testing.T) {
		for _, dl := range dialects {
			if r := runGuest(t, "page."+dl.runtime, dl.source, "--input", `{"name":"ada"}`); r.Status != "ok" || compact(r.Value) != jsxValue {
				t.Errorf("pmjail run page.%s: status %s value %s error %+v, want ok %s", dl.runtime, r.Status, r.Value, r.Error, jsxValue)
			}
			// The CLI sends a one-file program as the job's main file.
			r := runGuest(t, "page."+dl.runtime, dl.source, "--input", `{"name":"ada","fail":true}`)
			wantError(t, "pmjail run page."+dl.runtime+" that throws", r, guestError{Code: "Error", Message: "no ada"}, dl.line)
		}
		dir := t.TempDir()
		for name, text := range map[string]string{
			"main.tsx":     "import { Greeting } from \"./ui/greet.jsx\";\nexport default (input: { name: string }) => Greeting(input.name);\n",
			"ui/greet.jsx": "/** @jsx h */\nconst h = (tag, _p, ...c) => `<${tag}>${c.join(\"\")}</${tag}>`;\nexport const Greeting = (name) => <p>hello, <b>{name}</b></p>;\n",
		} {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		inv := pmjailCmd(t, "", "run", "--json", "--input", `{"name":"ada"}`, dir)
		var r guestResult
		if err := json.Unmarshal([]byte(inv.Stdout), &r); err != nil || r.Status != "ok" || compact(r.Value) != jsxValue {
			t.Errorf("pmjail run DIR (main.tsx): status %s value %s error %+v (%v, stderr %s), want ok %s", r.Status, r.Value, r.Error, err, inv.Stderr, jsxValue)
		}
	})

	d := startDaemon(t, daemonDir(t), warmConfig)
	run := func(t *testing.T, job *api.Job, warm bool) *api.Result {
		t.Helper()
		if warm {
			return warmRun(t, d, job)
		}
		// A job with env is never served warm.
		job.Env = map[string]string{"COLD": "1"}
		res, err := d.c.Run(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		if res.Warm {
			t.Fatalf("a job with env was served warm")
		}
		return res
	}
	for _, dl := range dialects {
		t.Run(dl.runtime, func(t *testing.T) {
			for _, warm := range []bool{true, false} {
				res := run(t, &api.Job{Runtime: dl.runtime, Source: dl.source, Input: json.RawMessage(`{"name":"ada"}`)}, warm)
				if res.Status != jail.StatusOK || compact(res.Value) != jsxValue {
					t.Errorf("warm %v: status %s value %s error %+v stderr %q, want ok %s", warm, res.Status, res.Value, res.Error, res.Stderr, jsxValue)
				}
				res = run(t, &api.Job{Runtime: dl.runtime, Source: dl.source, Input: json.RawMessage(`{"name":"ada","fail":true}`)}, warm)
				if res.Status != jail.StatusError || res.Error == nil || res.Error.Code != "Error" || res.Error.Message != "no ada" ||
					!strings.Contains(res.Error.Stack, dl.line) || strings.Contains(res.Error.Stack, "blob:") {
					t.Errorf("warm %v, a throw: status %s error %+v; want Error \"no ada\" whose stack names %s", warm, res.Status, res.Error, dl.line)
				}
			}
			// files, the entry named and the default one.
			entry := "app/page." + dl.runtime
			res := run(t, &api.Job{Runtime: "deno", Files: map[string]string{entry: dl.source}, Entry: entry,
				Input: json.RawMessage(`{"name":"ada","fail":true}`)}, false)
			if want := "file:///job/" + entry + ":"; res.Status != jail.StatusError || res.Error == nil || !strings.Contains(res.Error.Stack, want) {
				t.Errorf("entry %s: status %s error %+v, want an error whose stack names %s", entry, res.Status, res.Error, want)
			}
			res = run(t, &api.Job{Runtime: "deno", Files: map[string]string{"main." + dl.runtime: dl.source, "README": "x"},
				Input: json.RawMessage(`{"name":"ada"}`)}, false)
			if res.Status != jail.StatusOK || compact(res.Value) != jsxValue {
				t.Errorf("files with main.%s, no entry: status %s value %s error %+v, want ok %s", dl.runtime, res.Status, res.Value, res.Error, jsxValue)
			}
		})
	}
	t.Run("typecheck", func(t *testing.T) {
		res := run(t, &api.Job{Runtime: "tsx", Source: tsxHandler, TypeCheck: true, Input: json.RawMessage(`{"name":"ada"}`)}, false)
		if res.Status != jail.StatusOK || compact(res.Value) != jsxValue {
			t.Errorf("a TSX program that checks: status %s value %s error %+v stderr %q, want ok %s", res.Status, res.Value, res.Error, res.Stderr, jsxValue)
		}
		bad := strings.Replace(tsxHandler, "return html(", "const n: number = <i>x</i>;\n  return n + html(", 1)
		res = run(t, &api.Job{Runtime: "tsx", Source: bad, TypeCheck: true, Input: json.RawMessage(`{"name":"ada"}`)}, false)
		want := "Type 'Element' is not assignable to type 'number'. at file:///job/main.tsx:14:9"
		if res.Status != jail.StatusError || res.Error == nil || res.Error.Code != "TypeError" || res.Error.Message != want {
			t.Errorf("a TSX type error: status %s error %+v stderr %q, want TypeError %q", res.Status, res.Error, res.Stderr, want)
		}
	})
}
