package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/jail"
)

// echoOrigin is a loopback origin started by a test: it records the headers
// of every request it gets and answers /echo with them (in the body and in
// response headers), /hop?to=URL with a redirect there, anything else with
// "ok".
type echoOrigin struct {
	origin, port string
	mu           sync.Mutex
	got          []http.Header
	paths        []string
}

func newEchoOrigin(t *testing.T) *echoOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoOrigin{port: strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}
	e.origin = "http://127.0.0.1:" + e.port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.got = append(e.got, r.Header.Clone())
		e.paths = append(e.paths, r.Method+" "+r.URL.RequestURI())
		e.mu.Unlock()
		switch r.URL.Path {
		case "/hop":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		case "/echo":
			for k, vs := range r.Header {
				w.Header().Set("X-Echo-"+k, strings.Join(vs, ","))
			}
			_ = json.NewEncoder(w).Encode(r.Header)
		default:
			fmt.Fprint(w, "ok")
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return e
}

// requests returns what the origin has seen so far.
func (e *echoOrigin) requests() ([]http.Header, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]http.Header(nil), e.got...), append([]string(nil), e.paths...)
}

// trustDaemon starts a daemon whose request ceiling is ceilingRequest and
// whose secrets are secrets (both JSON objects).
func trustDaemon(t *testing.T, ceilingRequest, secrets string) *daemon {
	t.Helper()
	return startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 1, "max_queue": 4, "prestart": -1,
		"ceiling": {"limits": {"timeout": "60s"}, "capabilities": {"log": true, "request": `+ceilingRequest+`}, "secrets": `+secrets+`}}`)
}

func runJob(t *testing.T, d *daemon, req *api.Job) (*jail.Result, *client.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := d.c.Run(ctx, req)
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return nil, apiErr
	}
	if err != nil {
		t.Fatal(err)
	}
	return res, nil
}

// TestTrust_SecretBoundToOrigins: a client → daemon attack. The client's
// ceiling allows any origin, so it maps the operator's secret to its own
// echo server; the job must be refused. On the secret's own origin, an
// echoing server must not get the value back to the guest, the result or
// the daemon's log.
func TestTrust_SecretBoundToOrigins(t *testing.T) {
	const secret = "Bearer pmjail-trust-9c1e57f0a2"
	allowed, attacker := newEchoOrigin(t), newEchoOrigin(t)
	secretFile := filepath.Join(t.TempDir(), "api")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := trustDaemon(t, `{"origins": ["*"], "methods": ["GET"], "private_origins": [`+jsString(allowed.origin)+`, `+jsString(attacker.origin)+`]}`,
		`{"api": {"value_file": `+jsString(secretFile)+`, "origins": [`+jsString(allowed.origin)+`]}}`)

	send := func(origin string) string {
		return `const r = await host.request.send({ url: ` + jsString(origin+"/echo") + `, auth: "api" });
console.log(JSON.stringify(r));
await host.log.info(r.ok ? r.value.body : r.error.message, r.ok ? r.value.headers : {});`
	}
	t.Run("mapped to another origin", func(t *testing.T) {
		_, apiErr := runJob(t, d, &api.Job{Runtime: "deno", Source: send(attacker.origin), Capabilities: api.Capabilities{Log: true,
			Request: &api.RequestCapability{URLs: []string{attacker.origin}, Auth: map[string]string{attacker.origin: "api"}}}})
		if apiErr == nil || apiErr.StatusCode != 400 || apiErr.Field != `capabilities.request.auth["`+attacker.origin+`"]` {
			t.Errorf("a secret mapped to an origin outside its origins: %+v, want a 400 naming the auth entry", apiErr)
		}
		if got, _ := attacker.requests(); len(got) != 0 {
			t.Errorf("the attacker's origin got %d requests", len(got))
		}
	})
	t.Run("redirected away", func(t *testing.T) {
		// Mapped to both, a redirect from the secret's origin would carry it
		// to the attacker's: refused at resolve. Mapped only to its own, the
		// redirect goes without it.
		hop := `const r = await host.request.send({ url: ` + jsString(allowed.origin+"/hop?to="+attacker.origin+"/echo") + `, auth: "api" });
console.log(r.ok ? r.value.status : r.error.code);`
		_, apiErr := runJob(t, d, &api.Job{Runtime: "deno", Source: hop, Capabilities: api.Capabilities{Request: &api.RequestCapability{
			URLs: []string{allowed.origin, attacker.origin}, Auth: map[string]string{allowed.origin: "api", attacker.origin: "api"}}}})
		if apiErr == nil || apiErr.StatusCode != 400 || apiErr.Field != `capabilities.request.auth["`+attacker.origin+`"]` {
			t.Errorf("a secret mapped to the redirect's target: %+v, want a 400 naming the auth entry", apiErr)
		}
		res, apiErr := runJob(t, d, &api.Job{Runtime: "deno", Source: hop, Capabilities: api.Capabilities{Request: &api.RequestCapability{
			URLs: []string{allowed.origin, attacker.origin}, Auth: map[string]string{allowed.origin: "api"}}}})
		if apiErr != nil || strings.TrimSpace(res.Stdout) != "200" {
			t.Fatalf("a redirect away from the secret's origin: %+v %+v", res, apiErr)
		}
		got, paths := attacker.requests()
		for i, h := range got {
			if h.Get("Authorization") != "" {
				t.Errorf("the attacker's origin got Authorization on %s", paths[i])
			}
		}
		if len(got) != 1 {
			t.Errorf("the attacker's origin got %v, want the one redirected request", paths)
		}
	})
	t.Run("echoed back", func(t *testing.T) {
		res, apiErr := runJob(t, d, &api.Job{Runtime: "deno", Source: send(allowed.origin), Capabilities: api.Capabilities{Log: true,
			Request: &api.RequestCapability{URLs: []string{allowed.origin}, Auth: map[string]string{allowed.origin: "api"}}}})
		if apiErr != nil {
			t.Fatalf("the secret's own origin: %+v", apiErr)
		}
		got, _ := allowed.requests()
		if len(got) == 0 || got[len(got)-1].Get("Authorization") != secret {
			t.Fatalf("the allowed origin got %v, want the secret", got)
		}
		if res.Status != jail.StatusOK || !strings.Contains(res.Stdout, `"status":200`) {
			t.Fatalf("run %s stdout %q error %+v", res.Status, res.Stdout, res.Error)
		}
		whole, _ := json.Marshal(res)
		for where, s := range map[string]string{"the result": string(whole), "the daemon's log": d.logs.String()} {
			for _, part := range []string{secret, "pmjail-trust-9c1e57f0a2"} {
				if strings.Contains(s, part) {
					t.Errorf("%s holds the secret (%q)", where, part)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if m, err := d.c.Metrics(ctx); err != nil || strings.Contains(m, "pmjail-trust-9c1e57f0a2") {
			t.Errorf("metrics: %v, or they hold the secret", err)
		}
	})
}

// TestTrust_PrivateLiteralRefused: a client → daemon attack. Under
// allow_private_addresses false, a job that declares a loopback literal is
// refused like a name that resolves there; the ceiling's private_origins
// entry for that exact origin is what lets one through.
func TestTrust_PrivateLiteralRefused(t *testing.T) {
	target, listed := newEchoOrigin(t), newEchoOrigin(t)
	d := trustDaemon(t, `{"origins": ["*"], "allow_private_addresses": false, "private_origins": [`+jsString(listed.origin)+`]}`, `{}`)
	src := func(origin string) string {
		return `const r = await host.request.send({ url: ` + jsString(origin+"/ok") + ` });
console.log(r.ok ? r.value.status : r.error.code);`
	}
	for _, origin := range []string{target.origin, "http://[::ffff:127.0.0.1]:" + target.port, "http://[::127.0.0.1]:" + target.port} {
		res, apiErr := runJob(t, d, &api.Job{Runtime: "deno", Source: src(origin),
			Capabilities: api.Capabilities{Request: &api.RequestCapability{URLs: []string{origin}}}})
		if apiErr == nil && strings.TrimSpace(res.Stdout) != "denied" {
			t.Errorf("%s: the run got %q, want the job refused or the call denied", origin, res.Stdout)
		} else if apiErr != nil && (apiErr.StatusCode != 400 || apiErr.Field != "capabilities.request.urls[0]") {
			t.Errorf("%s: refusal %+v, want a 400 naming capabilities.request.urls[0]", origin, apiErr)
		}
	}
	if got, _ := target.requests(); len(got) != 0 {
		t.Errorf("the loopback listener got %d requests under allow_private_addresses false", len(got))
	}
	res, apiErr := runJob(t, d, &api.Job{Runtime: "deno", Source: src(listed.origin),
		Capabilities: api.Capabilities{Request: &api.RequestCapability{URLs: []string{listed.origin}}}})
	if apiErr != nil || strings.TrimSpace(res.Stdout) != "200" {
		t.Errorf("the origin in private_origins: %+v %+v, want 200", res, apiErr)
	}
}

// TestTrust_MethodOverrideDenied: a guest → host attack. A GET-only
// capability must not carry a method override that the origin would honour
// as DELETE.
func TestTrust_MethodOverrideDenied(t *testing.T) {
	o := newEchoOrigin(t)
	type call struct {
		name, url string
		headers   map[string]string
		want      string
	}
	calls := []call{
		{"X-HTTP-Method-Override", o.origin + "/a", map[string]string{"X-HTTP-Method-Override": "DELETE"}, "denied"},
		{"X-Method-Override", o.origin + "/b", map[string]string{"x-method-override": "delete"}, "denied"},
		{"X-HTTP-Method", o.origin + "/c", map[string]string{"X-HTTP-Method": " DELETE "}, "denied"},
		{"_method", o.origin + "/d?_method=DELETE", nil, "denied"},
		{"_method twice", o.origin + "/e?x=1&_method=GET&_method=PUT", nil, "denied"},
		{"declared override", o.origin + "/f?_method=GET", map[string]string{"X-HTTP-Method-Override": "GET"}, "200"},
	}
	var src strings.Builder
	src.WriteString("const out = {};\n")
	for _, c := range calls {
		h, _ := json.Marshal(c.headers)
		fmt.Fprintf(&src, "{ const r = await host.request.send({ url: %s, headers: %s }); out[%s] = r.ok ? String(r.value.status) : r.error.code; }\n",
			jsString(c.url), h, jsString(c.name))
	}
	src.WriteString("console.log(JSON.stringify(out));\n")
	r := runScript(t, "override.js", src.String(), "--cap", "request="+o.origin+":GET")
	var out map[string]string
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("status %s stdout %q error %+v", r.Status, r.Stdout, r.Error)
	}
	for _, c := range calls {
		if out[c.name] != c.want {
			t.Errorf("%s: %s, want %s", c.name, out[c.name], c.want)
		}
	}
	if _, paths := o.requests(); len(paths) != 1 {
		t.Errorf("the origin got %v, want only the declared override", paths)
	}
}

// TestTrust_GuestHeadersFiltered: a guest → host attack. Headers that claim
// a client address or host for the origin to trust are dropped, and the
// guest's headers are capped in count and bytes; its own Authorization and
// Cookie still pass on an origin without auth.
func TestTrust_GuestHeadersFiltered(t *testing.T) {
	o := newEchoOrigin(t)
	many := map[string]string{}
	for i := range 65 {
		many["X-H"+strconv.Itoa(i)] = "v"
	}
	fewer := map[string]string{}
	for i := range 60 {
		fewer["X-H"+strconv.Itoa(i)] = "v"
	}
	spoof := map[string]string{
		"X-Forwarded-For": "10.0.0.1", "X-Forwarded-Host": "admin.internal", "X-Forwarded-Proto": "https", "X-Real-IP": "10.0.0.1",
		"Forwarded": "for=10.0.0.1", "Authorization": "Bearer the-guests-own", "Cookie": "session=guest",
	}
	type call struct {
		name    string
		headers map[string]string
		want    string
	}
	calls := []call{
		{"spoof", spoof, "200"},
		{"65 headers", many, "too_large"},
		{"over 16 KiB", map[string]string{"X-Big": strings.Repeat("b", 16<<10)}, "too_large"},
		{"60 headers", fewer, "200"},
	}
	var src strings.Builder
	src.WriteString("const out = {};\n")
	for _, c := range calls {
		h, _ := json.Marshal(c.headers)
		fmt.Fprintf(&src, "{ const r = await host.request.send({ url: %s, headers: %s }); out[%s] = r.ok ? String(r.value.status) : r.error.code; }\n",
			jsString(o.origin+"/"+strings.ReplaceAll(c.name, " ", "-")), h, jsString(c.name))
	}
	src.WriteString("console.log(JSON.stringify(out));\n")
	r := runScript(t, "headers.js", src.String(), "--cap", "request="+o.origin+":GET")
	var out map[string]string
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("status %s stdout %q error %+v", r.Status, r.Stdout, r.Error)
	}
	for _, c := range calls {
		if out[c.name] != c.want {
			t.Errorf("%s: %s, want %s", c.name, out[c.name], c.want)
		}
	}
	got, paths := o.requests()
	if len(got) != 2 {
		t.Fatalf("the origin got %v, want the spoof and the 60 headers only", paths)
	}
	for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "Forwarded"} {
		if v := got[0].Get(k); v != "" {
			t.Errorf("the origin got %s: %s from the guest", k, v)
		}
	}
	if got[0].Get("Authorization") != "Bearer the-guests-own" || got[0].Get("Cookie") != "session=guest" {
		t.Errorf("the guest's own credentials on an origin without auth: %v", got[0])
	}
}
