package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
)

// These run scripts written for the platform's fetch (JS), and for
// pyodide.http.pyfetch and urllib.request.urlopen (Python), unchanged:
// each goes through the broker, with request.send's checks.

// fetchOrigin is a loopback origin for the fetch tests: /json answers
// JSON, /bytes takes a POST of the 256 byte values and answers them in
// reverse order (400 for any other body), /hop?to=URL redirects there,
// /items answers a JSON list.
// It records every request's method and path.
type fetchOrigin struct {
	origin string
	mu     sync.Mutex
	paths  []string
}

func newFetchOrigin(t *testing.T) *fetchOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &fetchOrigin{origin: "http://127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.paths = append(o.paths, r.Method+" "+r.URL.Path)
		o.mu.Unlock()
		switch r.URL.Path {
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"greeting":"héllo","n":7}`))
		case "/bytes":
			got, _ := io.ReadAll(r.Body)
			if r.Method != "POST" || !bytes.Equal(got, allBytes(false)) {
				http.Error(w, "want the 256 byte values in order, got "+strconv.Quote(string(got)), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(allBytes(true))
		case "/hop":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		case "/reason": // a reason phrase of the origin's own
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			bw.WriteString("HTTP/1.1 200 Fine Thanks\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			bw.Flush()
			c.Close()
		case "/items": // docs/guest-api.md's examples
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`[{"n":1}]`))
		default:
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return o
}

func (o *fetchOrigin) requests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.paths...)
}

// allBytes are the byte values 0..255, or 255..0.
func allBytes(reversed bool) []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
		if reversed {
			b[i] = byte(255 - i)
		}
	}
	return b
}

// fetchJS is a script as its author would write it for any runtime with
// fetch. It prints what it got as JSON.
const fetchJS = `
const origin = ORIGIN;
const r = await fetch(origin + "/json");
const data = await r.json();
const sent = new Uint8Array(256).map((_, i) => i);
const echo = await fetch(new Request(origin + "/bytes", { method: "POST", body: sent, headers: { "Content-Type": "application/octet-stream" } }));
const back = new Uint8Array(await echo.arrayBuffer());
const hop = await fetch(origin + "/hop?to=" + encodeURIComponent(origin + "/json"));
await hop.text();
const reason = await fetch(origin + "/reason");
console.log(JSON.stringify({
  status: r.status, ok: r.ok, type: r.headers.get("content-type"), data, url: r.url, redirected: r.redirected,
  reasons: [r.statusText, reason.statusText, await reason.text()],
  echo: echo.status, back: Array.from(back),
  hop: [hop.status, hop.url, hop.redirected],
}));
`

// fetchPy is the same in Python, with pyfetch and with urlopen.
const fetchPy = `
import json, urllib.request
from pyodide.http import pyfetch

origin = ORIGIN
sent = bytes(range(256))
r = await pyfetch(origin + "/json")
data = await r.json()
echo = await pyfetch(origin + "/bytes", method="POST", body=sent, headers={"Content-Type": "application/octet-stream"})
back = await echo.bytes()
with urllib.request.urlopen(origin + "/json") as u:
    u_data = json.loads(u.read())
    u_type = u.headers["Content-Type"]
req = urllib.request.Request(origin + "/bytes", data=sent, method="POST", headers={"Content-Type": "application/octet-stream"})
with urllib.request.urlopen(req) as u:
    uBack = u.read()
with urllib.request.urlopen(origin + "/hop?to=" + origin + "/json") as u:
    u_hop = [u.status, u.url]
with urllib.request.urlopen(origin + "/reason") as u:
    u_reason = u.reason
print(json.dumps({
    "status": r.status, "ok": r.ok, "type": r.headers["content-type"], "data": data, "url": r.url, "redirected": r.redirected,
    "reasons": [r.status_text, (await pyfetch(origin + "/reason")).status_text, u_reason],
    "echo": echo.status, "back": list(back),
    "urlopen": [u_data, u_type, list(uBack), u_hop],
}))
`

// fetchRefusedJS and fetchRefusedPy try url and print how each way of
// fetching it failed.
const fetchRefusedJS = `
try {
  const r = await fetch(__URL__);
  console.log(JSON.stringify(["fetch", "ALLOWED", r.status]));
} catch (e) {
  console.log(JSON.stringify(["fetch", e.name, e.message]));
}
`

const fetchRefusedPy = `
import json, urllib.request, urllib.error
from pyodide.http import pyfetch

for url in __URLS__:
    out = []
    try:
        out.append(["pyfetch", "ALLOWED", (await pyfetch(url)).status])
    except Exception as e:
        out.append(["pyfetch", type(e).__name__, str(e)])
    try:
        out.append(["urlopen", "ALLOWED", urllib.request.urlopen(url).status])
    except urllib.error.URLError as e:
        out.append(["urlopen", type(e).__name__, str(e.reason)])
    print(json.dumps(out))
`

func TestFetch_DeclaredOriginRuns(t *testing.T) {
	o := newFetchOrigin(t)
	for _, c := range []struct{ name, src string }{
		{"main.js", strings.Replace(fetchJS, "ORIGIN", jsString(o.origin), 1)},
		{"main.py", strings.Replace(fetchPy, "ORIGIN", jsString(o.origin), 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runScript(t, c.name, c.src, "--cap", "request="+o.origin+":GET,POST")
			var got struct {
				Status     int             `json:"status"`
				OK         bool            `json:"ok"`
				Type       string          `json:"type"`
				Data       json.RawMessage `json:"data"`
				URL        string          `json:"url"`
				Redirected bool            `json:"redirected"`
				Echo       int             `json:"echo"`
				Back       []int           `json:"back"`
				Hop        []any           `json:"hop"`
				Urlopen    []any           `json:"urlopen"`
				Reasons    []string        `json:"reasons"`
			}
			if r.Status != "ok" || json.Unmarshal([]byte(r.Stdout), &got) != nil {
				t.Fatalf("status %s stdout %q stderr %q error %+v", r.Status, r.Stdout, r.Stderr, r.Error)
			}
			var data map[string]any
			_ = json.Unmarshal(got.Data, &data)
			if got.Status != 200 || !got.OK || got.Type != "application/json" || data["greeting"] != "héllo" ||
				got.URL != o.origin+"/json" || got.Redirected {
				t.Errorf("GET /json: %+v", got)
			}
			back := make([]byte, len(got.Back))
			for i, v := range got.Back {
				back[i] = byte(v)
			}
			if got.Echo != 200 || !bytes.Equal(back, allBytes(true)) {
				t.Errorf("the 256 byte values both ways: status %d, got back %v", got.Echo, got.Back)
			}
			// The origin's own reason phrase, not one made up from the code.
			wantReasons := []string{"OK", "Fine Thanks", "ok"}
			if c.name == "main.py" {
				wantReasons[2] = "Fine Thanks" // urlopen's reason
			}
			if !slices.Equal(got.Reasons, wantReasons) {
				t.Errorf("reason phrases %q, want %q", got.Reasons, wantReasons)
			}
			if c.name == "main.js" {
				if want := []any{200.0, o.origin + "/json", true}; !jsonEqual(got.Hop, want) {
					t.Errorf("redirected: %v, want %v", got.Hop, want)
				}
				return
			}
			uBack := []any{}
			for _, b := range allBytes(true) {
				uBack = append(uBack, float64(b))
			}
			want := []any{map[string]any{"greeting": "héllo", "n": 7.0}, "application/json", uBack, []any{200.0, o.origin + "/json"}}
			if !jsonEqual(got.Urlopen, want) {
				t.Errorf("urlopen: %v, want %v", got.Urlopen, want)
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// TestFetch_UndeclaredRefused: a guest → host attack. fetch to an origin
// the job did not declare, or redirected there from one it did, or with no
// request capability at all, is refused with the capability that is
// missing, and the origin sees nothing.
func TestFetch_UndeclaredRefused(t *testing.T) {
	declared, other := newFetchOrigin(t), newFetchOrigin(t)
	notDeclared := "fetch denied: origin " + other.origin + " is not declared in capabilities.request.urls"
	cases := []struct {
		name, url string
		flags     []string
		want      string
	}{
		{"undeclared origin", other.origin + "/json", []string{"--cap", "request=" + declared.origin}, notDeclared},
		{"redirected away", declared.origin + "/hop?to=" + other.origin + "/json", []string{"--cap", "request=" + declared.origin},
			"fetch denied: redirect to " + other.origin + "/json: origin " + other.origin + " is not declared in capabilities.request.urls"},
		{"no capability", other.origin + "/json", nil, "fetch denied: the job did not declare the request capability"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runScript(t, "main.js", strings.Replace(fetchRefusedJS, "__URL__", jsString(c.url), 1), c.flags...)
			if want := `["fetch","TypeError",` + jsString(c.want) + "]\n"; r.Status != "ok" || r.Stdout != want {
				t.Errorf("fetch: status %s stdout %q error %+v, want %q", r.Status, r.Stdout, r.Error, want)
			}
			// An uncaught refusal ends the run as the guest's TypeError,
			// its stack in the guest's code.
			r = runScript(t, "main.js", "await fetch("+jsString(c.url)+");\n", c.flags...)
			if r.Status != "error" || r.Error == nil || r.Error.Code != "TypeError" || r.Error.Message != c.want ||
				!strings.Contains(r.Error.Stack, "/job/main.js:1:") || strings.Contains(r.Error.Stack, "fetch.js") {
				t.Errorf("uncaught: status %s error %+v", r.Status, r.Error)
			}
		})
	}
	t.Run("python", func(t *testing.T) {
		// One run, both ways of fetching, the first two cases.
		src := strings.Replace(fetchRefusedPy, "__URLS__", "["+jsString(cases[0].url)+", "+jsString(cases[1].url)+"]", 1)
		r := runScript(t, "main.py", src, cases[0].flags...)
		want := `[["pyfetch", "AbortError", ` + jsString(cases[0].want) + `], ["urlopen", "URLError", ` + jsString(cases[0].want) + `]]` + "\n" +
			`[["pyfetch", "AbortError", ` + jsString(cases[1].want) + `], ["urlopen", "URLError", ` + jsString(cases[1].want) + `]]` + "\n"
		if r.Status != "ok" || r.Stdout != want {
			t.Errorf("status %s stdout %q stderr %q error %+v\nwant %q", r.Status, r.Stdout, r.Stderr, r.Error, want)
		}
	})
	if got := other.requests(); len(got) != 0 {
		t.Errorf("the undeclared origin got %v", got)
	}
}

// TestFetch_SecretInjected: fetch to an origin the job's auth map names
// carries the operator's secret, which the guest never sees: not in what
// an echoing origin sends back, nor in the result or the daemon's log.
func TestFetch_SecretInjected(t *testing.T) {
	const secret = "Bearer pmjail-fetch-5b2d81c7e4"
	o := newEchoOrigin(t)
	secretFile := filepath.Join(t.TempDir(), "api")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := trustDaemon(t, `{"origins": ["*"], "methods": ["GET"], "private_origins": [`+jsString(o.origin)+`]}`,
		`{"api": {"value_file": `+jsString(secretFile)+`, "origins": [`+jsString(o.origin)+`]}}`)
	src := `const r = await fetch(` + jsString(o.origin+"/echo") + `);
console.log(JSON.stringify({ status: r.status, auth: r.headers.get("x-echo-authorization"), body: await r.text() }));
try {
  await fetch(` + jsString(o.origin+"/echo") + `, { headers: { Authorization: "Bearer mine" } });
} catch (e) {
  console.log(e.message);
}`
	res, apiErr := runJob(t, d, &api.Job{Runtime: "deno", Source: src, Capabilities: api.Capabilities{
		Request: &api.RequestCapability{URLs: []string{o.origin}, Auth: map[string]string{o.origin: "api"}}}})
	if apiErr != nil {
		t.Fatalf("job refused: %+v", apiErr)
	}
	got, _ := o.requests()
	if len(got) != 1 || got[0].Get("Authorization") != secret {
		t.Fatalf("the origin got %v, want one request with the secret", got)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	var first struct {
		Status int    `json:"status"`
		Auth   string `json:"auth"`
	}
	if res.Status != jail.StatusOK || len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &first) != nil ||
		first.Status != 200 || !strings.Contains(first.Auth, "[redacted]") {
		t.Fatalf("run %s stdout %q error %+v", res.Status, res.Stdout, res.Error)
	}
	if want := "fetch denied: header Authorization is reserved on " + o.origin + ", where the broker injects credentials"; lines[1] != want {
		t.Errorf("the guest's own Authorization: %q, want %q", lines[1], want)
	}
	whole, _ := json.Marshal(res)
	for where, s := range map[string]string{"the result": string(whole), "the daemon's log": d.logs.String()} {
		if strings.Contains(s, "pmjail-fetch-5b2d81c7e4") {
			t.Errorf("%s holds the secret", where)
		}
	}
}

// TestFetch_GuestAPIExamples runs the examples of docs/guest-api.md's
// fetch section against a local origin in place of api.example.com.
func TestFetch_GuestAPIExamples(t *testing.T) {
	o := newFetchOrigin(t)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "guest-api.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## fetch\n")
	if !ok {
		t.Fatal("docs/guest-api.md has no fetch section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	ran := 0
	for _, block := range strings.Split(section, "```")[1:] {
		lang, code, _ := strings.Cut(block, "\n")
		name := map[string]string{"js": "main.js", "python": "main.py"}[lang]
		if name == "" {
			continue
		}
		ran++
		code = strings.ReplaceAll(code, "https://api.example.com", o.origin)
		r := runScript(t, name, code, "--cap", "request="+o.origin+":GET,POST")
		if r.Status != "ok" {
			t.Errorf("the %s example: status %s stdout %q stderr %q error %+v", lang, r.Status, r.Stdout, r.Stderr, r.Error)
		}
	}
	if ran != 2 {
		t.Errorf("ran %d examples, want the JS and the Python one", ran)
	}
	if got := o.requests(); len(got) != 3 {
		t.Errorf("the origin got %v, want the examples' three requests", got)
	}
}

// fetchWorkerJS fetches from a Worker and from a Worker that Worker
// starts, as code written for the platform would: the declared origin,
// and one the job did not declare.
const fetchWorkerJS = `
const code = ` + "`" + `
self.onmessage = async (e) => {
  const out = {};
  const r = await fetch(e.data.origin + "/json");
  out.json = [r.status, r.statusText, (await r.json()).greeting];
  try {
    await fetch(e.data.other + "/json");
    out.other = "ALLOWED";
  } catch (err) {
    out.other = [err.name, err.message];
  }
  const inner = new Worker(URL.createObjectURL(new Blob(['self.onmessage = async (e) => { const r = await fetch(e.data); self.postMessage([r.status, await r.text()]); };'], { type: "application/javascript" })), { type: "module" });
  out.nested = await new Promise((resolve) => {
    inner.onmessage = (m) => resolve(m.data);
    inner.postMessage(e.data.origin + "/items");
  });
  inner.terminate();
  self.postMessage(out);
};` + "`" + `;
const w = new Worker(URL.createObjectURL(new Blob([code], { type: "application/javascript" })), { type: "module" });
const out = await new Promise((resolve) => {
  w.onmessage = (e) => resolve(e.data);
  w.postMessage({ origin: ORIGIN, other: OTHER });
});
w.terminate();
console.log(JSON.stringify(out));
`

// TestFetch_InWorkers: a Worker's fetch, and a nested Worker's, go through
// the broker as the main thread's does (a guest → host attack included:
// an undeclared origin is refused there too, and sees nothing), and a
// script whose Workers are done still ends.
func TestFetch_InWorkers(t *testing.T) {
	declared, other := newFetchOrigin(t), newFetchOrigin(t)
	src := strings.NewReplacer("ORIGIN", jsString(declared.origin), "OTHER", jsString(other.origin)).Replace(fetchWorkerJS)
	r := runScript(t, "main.js", src, "--cap", "request="+declared.origin)
	want := `{"json":[200,"OK","héllo"],"other":["TypeError",` +
		jsString("fetch denied: origin "+other.origin+" is not declared in capabilities.request.urls") +
		`],"nested":[200,"[{\"n\":1}]"]}` + "\n"
	if r.Status != "ok" || r.Stdout != want {
		t.Fatalf("status %s stdout %q stderr %q error %+v\nwant %q", r.Status, r.Stdout, r.Stderr, r.Error, want)
	}
	if got, want := declared.requests(), []string{"GET /json", "GET /items"}; !slices.Equal(got, want) {
		t.Errorf("the declared origin got %v, want %v", got, want)
	}
	if got := other.requests(); len(got) != 0 {
		t.Errorf("the undeclared origin got %v", got)
	}

	// A warm runtime's Workers: the same through the daemon.
	d := startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 1, "max_queue": 4, "socket": {"mode": "0660"}, "prestart": -1, "warm": {"deno": 1},
		"ceiling": {"capabilities": {"request": {"origins": ["*"], "methods": ["GET"], "private_origins": [`+jsString(declared.origin)+`, `+jsString(other.origin)+`]}}}}`)
	res := warmRun(t, d, &api.Job{Runtime: "deno", Source: src, Capabilities: api.Capabilities{
		Request: &api.RequestCapability{URLs: []string{declared.origin}}}})
	if res.Status != api.StatusOK || res.Stdout != want {
		t.Fatalf("warm: status %s stdout %q stderr %q error %+v\nwant %q", res.Status, res.Stdout, res.Stderr, res.Error, want)
	}
	if got := other.requests(); len(got) != 0 {
		t.Errorf("the undeclared origin got %v", got)
	}
}

// workerOrderJS starts a Worker from the job's own files, then one from a
// TypeScript file (its module is transpiled, so it loads a turn later),
// and posts each a message at once, as code written for the platform
// does: Deno holds a Worker's messages until its module is evaluated.
const workerOrderJS = `
const out = [];
for (const f of ["w.js", "w.ts"]) {
  const w = new Worker(new URL("./" + f, import.meta.url), { type: "module" });
  out.push(await new Promise((resolve) => {
    const lost = setTimeout(() => resolve("LOST"), 10000);
    w.onmessage = (e) => { clearTimeout(lost); resolve(e.data); };
    w.postMessage(f);
  }));
  w.terminate();
}
console.log(JSON.stringify(out));
`

// TestFetch_WorkerFirstMessage: the wrapper that gives a Worker fetch
// does not make it lose the first message its maker posts (a dynamic
// import of the job's module left a turn in which the message was
// dispatched before the module listened for it), nor change where the
// Worker is: its location is its module's, and a relative specifier of a
// Worker it starts is resolved against it (both were the wrapper's blob:
// URL, and the nested Worker failed with "Invalid URL").
func TestFetch_WorkerFirstMessage(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"main.js": workerOrderJS,
		"w.js": `self.onmessage = async (e) => {
  const n = new Worker("./n.js", { type: "module" });
  const nested = await new Promise((resolve) => { n.onmessage = (m) => resolve(m.data); n.postMessage(""); });
  n.terminate();
  self.postMessage("js " + e.data + " " + location.href + " " + nested);
};`,
		"n.js": `self.onmessage = () => self.postMessage("nested " + new URL("./data.json", location.href).pathname);`,
		"w.ts": `const tag: string = "ts "; self.onmessage = (e: MessageEvent) => self.postMessage(tag + e.data);`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	inv := pmjailCmd(t, "", "run", "--json", "--timeout", "60s", dir)
	if inv.Result == nil {
		t.Fatalf("no result (exit %d)\nstdout: %s\nstderr: %s", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	if r, want := inv.Result, `["js w.js file:///job/w.js nested /job/data.json","ts w.ts"]`+"\n"; r.Status != "ok" || r.Stdout != want {
		t.Fatalf("status %s stdout %q stderr %q error %+v, want stdout %q", r.Status, r.Stdout, r.Stderr, r.Error, want)
	}
}
