package ipc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/strictjson"
	"github.com/pmjail/pmjail/internal/testenv"
)

// TestClassifyEveryForm: an address is judged by where the packet ends up,
// whatever IPv6 form wraps the IPv4 address it carries.
func TestClassifyEveryForm(t *testing.T) {
	for _, c := range []struct {
		addr string
		want addrClass
	}{
		{"93.184.216.34", addrPublic},
		{"2606:2800:220:1::", addrPublic},
		{"::ffff:93.184.216.34", addrPublic},
		{"64:ff9b::93.184.216.34", addrPublic},
		{"2002:5db8:d822::1", addrPublic},
		{"127.0.0.1", addrPrivate},
		{"127.1.2.3", addrPrivate},
		{"::1", addrPrivate},
		{"10.1.2.3", addrPrivate},
		{"172.20.0.1", addrPrivate},
		{"192.168.1.1", addrPrivate},
		{"100.64.0.1", addrPrivate},
		{"fd12::1", addrPrivate},
		{"fe80::1", addrPrivate},
		{"fe80::1%eth0", addrPrivate},
		{"fec0::1", addrPrivate},            // site-local, deprecated but routed by some
		{"::127.0.0.1", addrPrivate},        // IPv4-compatible
		{"::10.0.0.1", addrPrivate},         // IPv4-compatible
		{"::ffff:127.0.0.1", addrPrivate},   // IPv4-mapped
		{"::ffff:0:127.0.0.1", addrPrivate}, // IPv4-translated
		{"::ffff:0:10.1.1.1", addrPrivate},
		{"64:ff9b::127.0.0.1", addrPrivate},                      // NAT64
		{"64:ff9b::10.0.0.1", addrPrivate},                       // NAT64
		{"64:ff9b:1::a00:1", addrPrivate},                        // local-use NAT64 is never public
		{"64:ff9b:1::5db8:d822", addrPrivate},                    // local-use NAT64 is never public
		{"2002:7f00:1::1", addrPrivate},                          // 6to4 of 127.0.0.1
		{"2002:c0a8:0101::1", addrPrivate},                       // 6to4 of 192.168.1.1
		{"2001:0:5db8:d822::" + xorV4("127.0.0.1"), addrPrivate}, // Teredo, client 127.0.0.1
		{"2001:0:a00:1::" + xorV4("93.184.216.34"), addrPrivate}, // Teredo, server 10.0.0.1
		{"2001:0:5db8:d822::" + xorV4("93.184.216.34"), addrPublic},
		{"169.254.169.254", addrForbidden},
		{"169.254.170.2", addrForbidden}, // ECS task credentials
		{"169.254.1.1", addrForbidden},   // all of IPv4 link-local
		{"::ffff:169.254.169.254", addrForbidden},
		{"::169.254.169.254", addrForbidden},
		{"::ffff:0:169.254.169.254", addrForbidden},
		{"64:ff9b::169.254.169.254", addrForbidden},
		{"2002:a9fe:a9fe::1", addrForbidden},
		{"2001:0:5db8:d822::" + xorV4("169.254.169.254"), addrForbidden},
		{"168.63.129.16", addrForbidden}, // Azure's wire server
		{"fd00:ec2::254", addrForbidden},
		{"fd00:ec2::23", addrForbidden}, // ECS task credentials over IPv6
		{"100.100.100.200", addrForbidden},
		{"fd20:ce::254", addrForbidden},
		{"fd00:c1::a9fe:a9fe", addrForbidden},
		{"fd20:ce::253", addrPrivate},
		{"192.0.0.192", addrForbidden}, // Oracle Cloud
		{"0.0.0.0", addrForbidden},
		{"::", addrForbidden},
		{"::ffff:0.0.0.0", addrForbidden},
		{"224.0.0.1", addrForbidden},
		{"ff02::1", addrForbidden},
		{"255.255.255.255", addrForbidden},
		{"2001:db8::1", addrForbidden}, // documentation
		{"3fff::1", addrForbidden},     // documentation (RFC 9637)
		{"2001:2::1", addrForbidden},   // benchmarking
		{"198.18.0.1", addrForbidden},  // benchmarking
		{"203.0.113.1", addrForbidden}, // documentation
		{"2001:3::1", addrPublic},      // AMT, routed
	} {
		if got := classify(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("classify(%s) = %d, want %d", c.addr, got, c.want)
		}
	}
}

// xorV4 is the last 32 bits of a Teredo address whose client is v4 (stored
// inverted, as RFC 4380 does).
func xorV4(v4 string) string {
	b := netip.MustParseAddr(v4).As4()
	return fmt.Sprintf("%02x%02x:%02x%02x", b[0]^0xff, b[1]^0xff, b[2]^0xff, b[3]^0xff)
}

// strictCeiling is a daemon's: no literal exemption.
func strictCeiling() Ceiling {
	return Ceiling{AllowLog: true, AllowRequest: true}.WithDefaults()
}

// TestPrivateLiteralNeedsEntry: under AllowPrivateAddresses false a
// loopback literal is refused at resolve and, were it let through, at the
// call; naming it in PrivateOrigins lets it through.
func TestPrivateLiteralNeedsEntry(t *testing.T) {
	noLeak(t)
	srv := testServer(t)
	caps := Capabilities{Request: &RequestCapability{URLs: []string{srv.URL}}}
	err := caps.Within(strictCeiling())
	var se *strictjson.Error
	if !errors.As(err, &se) || se.Field != "capabilities.request.urls[0]" {
		t.Errorf("Within: %v, want a refusal of capabilities.request.urls[0]", err)
	}
	r := startServe(t, context.Background(), SessionConfig{Capabilities: caps, Ceiling: strictCeiling()})
	wantCode(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/hello"}), CodeDenied)
	r.finish(t)

	ceil := strictCeiling()
	ceil.PrivateOrigins = []string{srv.URL}
	ceil, err = ceil.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	r = requestSession(t, caps.Request, ceil, nil)
	if res := decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/hello"})); res.Status != 200 {
		t.Errorf("an origin in PrivateOrigins: %+v", res)
	}
	r.finish(t)

	bad := strictCeiling()
	bad.PrivateOrigins = []string{"http://127.0.0.1/path"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "ceiling.private_origins[0]") {
		t.Errorf("a private origin that is not an origin: %v", err)
	}
}

// secretEcho is an origin that echoes the secret's header back in every
// form a scrubber might miss, and redirects /hop to ?to.
func secretEcho(t *testing.T, seen *[]string, mu *sync.Mutex) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("Authorization")
		mu.Lock()
		*seen = append(*seen, r.Host+" "+v)
		mu.Unlock()
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			return
		}
		token := strings.TrimPrefix(v, "Bearer ")
		w.Header().Set("X-Echo", v)
		w.Header().Set("X-Token-"+token, "1")
		q, _ := json.Marshal(v)
		fmt.Fprintf(w, "%s|%s|%s|%s|%s", v, token, q, base64.StdEncoding.EncodeToString([]byte(v)), strconv.QuoteToASCII(token))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestSecretBoundToOrigins: a secret goes only to the origins it names,
// checked at resolve, at the first request and at every redirect hop, and
// an origin that echoes it does not get it back to the guest.
func TestSecretBoundToOrigins(t *testing.T) {
	noLeak(t)
	const value = "Bearer tok_<9f8e7d&6c5b4a>/z"
	var mu sync.Mutex
	var seen []string
	home := secretEcho(t, &seen, &mu)
	away := secretEcho(t, &seen, &mu)
	ceil := PermissiveCeiling()
	ceil.Secrets = map[string]Secret{"api": {Value: value, Origins: []string{home.URL}}}
	ceil, err := ceil.Prepare()
	if err != nil {
		t.Fatal(err)
	}

	// Resolve: mapped to an origin the secret does not name.
	caps := Capabilities{Request: &RequestCapability{URLs: []string{home.URL, away.URL}, Auth: map[string]string{home.URL: "api", away.URL: "api"}}}
	if err := caps.Validate(); err != nil {
		t.Fatal(err)
	}
	var se *strictjson.Error
	if err := caps.Within(ceil); !errors.As(err, &se) || se.Field != fmt.Sprintf("capabilities.request.auth[%q]", away.URL) {
		t.Errorf("Within: %v, want a refusal naming the auth entry", err)
	}

	// The broker checks again (capabilities that skipped Within): at the
	// first request, and at a redirect from the secret's origin.
	r := startServe(t, context.Background(), SessionConfig{Capabilities: caps, Ceiling: ceil})
	wantCode(t, r.g.call("request.send", map[string]any{"url": away.URL + "/", "auth": "api"}), CodeDenied)
	f := r.g.call("request.send", map[string]any{"url": home.URL + "/hop?to=" + away.URL + "/", "auth": "api"})
	wantCode(t, f, CodeDenied)
	if !strings.Contains(f.Error.Message, "redirect") {
		t.Errorf("the refusal %q does not say it was the redirect", f.Error.Message)
	}
	// On its own origin the secret is sent; what comes back is scrubbed.
	res := decodeResult(t, r.g.call("request.send", map[string]any{"url": home.URL + "/", "auth": "api"}))
	if res.Status != 200 || !strings.Contains(res.Body, "[redacted]") {
		t.Errorf("result %+v", res)
	}
	r.finish(t)

	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if strings.Contains(s, value) && !strings.HasPrefix(s, strings.TrimPrefix(home.URL, "http://")) {
			t.Errorf("the secret reached %s", s)
		}
	}
	saw := r.g.sawBytes()
	token := strings.TrimPrefix(value, "Bearer ")
	q, _ := json.Marshal(value)
	for _, form := range []string{value, token, string(q[1 : len(q)-1]), base64.StdEncoding.EncodeToString([]byte(value)),
		strings.Trim(strconv.QuoteToASCII(token), `"`)} {
		if bytes.Contains(saw, []byte(form)) {
			t.Errorf("the guest got the secret as %q", form)
		}
	}
}

// TestMethodOverrideDenied: an override header or _method naming a method
// the job did not declare is denied; one naming a declared method passes.
func TestMethodOverrideDenied(t *testing.T) {
	noLeak(t)
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.URL.Path, true)
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusTemporaryRedirect)
		}
	}))
	t.Cleanup(srv.Close)
	r := requestSession(t, &RequestCapability{URLs: []string{srv.URL}, Methods: []string{"GET", "POST"}}, PermissiveCeiling(), nil)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for name, params := range map[string]map[string]any{
		"X-HTTP-Method-Override": {"url": srv.URL + "/1", "headers": map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		"X-Method-Override":      {"url": srv.URL + "/2", "headers": map[string]string{"x-method-override": "put"}},
		"X-HTTP-Method":          {"url": srv.URL + "/3", "headers": map[string]string{"X-Http-Method": "PATCH"}},
		"_method":                {"url": srv.URL + "/4?_method=DELETE"},
		"_method upper":          {"url": srv.URL + "/5?_METHOD=delete"},
		"_method in a form":      {"url": srv.URL + "/6", "method": "POST", "body": "a=1&_method=DELETE", "headers": map[string]string{"Content-Type": "application/x-www-form-urlencoded"}},
		"_method after redirect": {"url": srv.URL + "/hop?to=" + srv.URL + "/7%3F_method%3DDELETE"},
		"_method in a multipart form": {"url": srv.URL + "/8", "method": "POST", "body": "--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--b--\r\n",
			"headers": map[string]string{"Content-Type": "multipart/form-data; boundary=b"}},
		"_method in JSON":        {"url": srv.URL + "/9", "method": "POST", "body": `{"a":1,"_method":"DELETE"}`, "headers": map[string]string{"Content-Type": "application/json"}},
		"X_HTTP_METHOD_OVERRIDE": {"url": srv.URL + "/10", "headers": map[string]string{"X_HTTP_METHOD_OVERRIDE": "DELETE"}},
		// Go's url.ParseQuery gives up past 10,000 fields (and drops a
		// field holding a ';'); PHP keeps the first 1,000, Express's qs
		// the first 1,000, and Rack 2 splits at ';' too.
		"_method before 10,000 fields":       {"url": srv.URL + "/11", "method": "POST", "body": "_method=DELETE&" + strings.Repeat("a=1&", 10000), "headers": form},
		"_method before 10,000 query fields": {"url": srv.URL + "/12?_method=DELETE" + strings.Repeat("&a", 10000)},
		"_method after a ';'":                {"url": srv.URL + "/13", "method": "POST", "body": "a=1;_method=DELETE", "headers": form},
		// PHP reads a field named " method" or ".method" as _method.
		"_method as PHP names it": {"url": srv.URL + "/14?.method=DELETE"},
		// A media type whose parameters do not parse is still a form to
		// a server that reads it up to its ';'.
		"_method in a form whose type does not parse": {"url": srv.URL + "/15", "method": "POST", "body": "_method=DELETE",
			"headers": map[string]string{"Content-Type": "application/x-www-form-urlencoded; charset"}},
		// A server that skips a part it cannot read reads the next.
		"_method after a malformed part": {"url": srv.URL + "/16", "method": "POST",
			"body":    "--b\r\nno colon\r\n\r\nx\r\n--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--b--\r\n",
			"headers": map[string]string{"Content-Type": "multipart/form-data; boundary=b"}},
		// Rack reads a POST without a Content-Type as a URL-encoded form.
		"_method in a form without a type": {"url": srv.URL + "/17", "method": "POST", "body": "_method=DELETE"},
		// Laravel reads a body as JSON when its type holds "/json" or
		// "+json" anywhere.
		"_method in JSON of a +json type": {"url": srv.URL + "/18", "method": "POST", "body": `{"_method":"DELETE"}`,
			"headers": map[string]string{"Content-Type": "application/vnd.api+json"}},
		"_method in JSON of a text/json type": {"url": srv.URL + "/19", "method": "POST", "body": `{"_method":"DELETE"}`,
			"headers": map[string]string{"Content-Type": "text/json"}},
	} {
		f := r.g.call("request.send", params)
		if f.OK || f.Error.Code != CodeDenied {
			t.Errorf("%s: want denied, got ok=%v %+v", name, f.OK, f.Error)
		}
	}
	// Two Content-Types (names that differ in case), which a server may
	// read either of, are not a request the broker sends.
	f := r.g.call("request.send", map[string]any{"url": srv.URL + "/20", "method": "POST", "body": "_method=DELETE",
		"headers": map[string]string{"Content-Type": "text/plain", "content-type": "application/x-www-form-urlencoded"}})
	wantCode(t, f, CodeInvalidRequest)
	if !strings.Contains(f.Error.Message, "Content-Type") {
		t.Errorf("refusal %q does not name Content-Type", f.Error.Message)
	}
	decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/ok?_method=post", "headers": map[string]string{"X-HTTP-Method-Override": "GET"}}))
	// A body no server reads as a form or as JSON is not one.
	decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/text", "method": "POST", "body": "_method=DELETE",
		"headers": map[string]string{"Content-Type": "text/plain"}}))
	r.finish(t)
	for _, p := range []string{"/1", "/2", "/3", "/4", "/5", "/6", "/7", "/8", "/9", "/10", "/11", "/12", "/13", "/14", "/15", "/16", "/17", "/18", "/19", "/20"} {
		if _, ok := hits.Load(p); ok {
			t.Errorf("the origin got %s", p)
		}
	}
	if _, ok := hits.Load("/ok"); !ok {
		t.Error("the declared override did not reach the origin")
	}
}

// TestRequestBodyCheckedOnce: the broker reads a body for _method as its
// Content-Type makes a server read it, in the session's read loop, where
// the host's CPU time is no run's. A call that gave Content-Type 64 times
// (names that differ in case) had its body parsed 64 times: a megabyte
// multipart form of tiny parts cost the daemon seconds a call. A call
// gives Content-Type once (invalid_request otherwise), and costs at most
// the one parse of a call that gives it once.
func TestRequestBodyCheckedOnce(t *testing.T) {
	noLeak(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	r := requestSession(t, &RequestCapability{URLs: []string{srv.URL}, Methods: []string{"POST"}}, PermissiveCeiling(), nil)
	// Tiny parts cost a multipart reader the most a byte; the last names
	// an undeclared method, so a call that reads it all is denied.
	body := strings.Repeat("--b\r\n\r\n\r\n", 100000) + "--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nPATCH\r\n--b--\r\n"
	const ct = "multipart/form-data; boundary=b"
	call := func(headers map[string]string) (hostFrame, time.Duration) {
		before := processCPU(t)
		f := r.g.call("request.send", map[string]any{"url": srv.URL + "/", "method": "POST", "body": body, "headers": headers})
		return f, processCPU(t) - before
	}
	once, one := call(map[string]string{"Content-Type": ct})
	wantCode(t, once, CodeDenied)
	many := map[string]string{}
	for i := range 64 {
		name := []byte("content-type")
		for j := range 6 {
			if i>>j&1 == 1 {
				name[j] -= 'a' - 'A'
			}
		}
		many[string(name)] = ct
	}
	f, all := call(many)
	t.Logf("one Content-Type: %s of CPU; 64: %s", one, all)
	if all > 2*one+100*time.Millisecond {
		t.Errorf("a call giving Content-Type 64 times cost the host %s of CPU, one giving it once %s", all, one)
	}
	wantCode(t, f, CodeInvalidRequest)
	if !strings.Contains(f.Error.Message, "Content-Type is given 64 times") {
		t.Errorf("refusal %q does not say Content-Type was given 64 times", f.Error.Message)
	}
	r.finish(t)
	if n := hits.Load(); n != 0 {
		t.Errorf("the origin got %d requests", n)
	}
}

// TestRequestFormBounded: the broker reads a multipart body for _method
// parts in the session's read loop, on CPU time no run counts. A form of
// tiny parts, or of parts of many header lines, cost the daemon several
// allocations a part and a line, some twice what decoding a plain frame
// of the same size costs. It reads at most 1000 parts and 10,000 header
// lines in all, as Go's ReadForm does (a Go origin refuses more), and
// refuses a form of more as one it cannot check.
func TestRequestFormBounded(t *testing.T) {
	noLeak(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	r := requestSession(t, &RequestCapability{URLs: []string{srv.URL}, Methods: []string{"POST"}}, PermissiveCeiling(), nil)
	form := func(parts, lines int, method string) map[string]any {
		part := "--b\r\n" + strings.Repeat("a:\r\n", lines) + "\r\n\r\n"
		body := strings.Repeat(part, parts) + "--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\n" + method + "\r\n--b--\r\n"
		return map[string]any{"url": srv.URL + "/", "method": "POST", "body": body, "headers": map[string]string{"Content-Type": "multipart/form-data; boundary=b"}}
	}
	// A plain body of the frame cap's size is the control: what reading
	// a frame costs the daemon.
	room := DefaultMaxFrame - 4<<10
	plain := map[string]any{"url": srv.URL + "/?_method=PATCH", "method": "POST", "body": strings.Repeat("a", room),
		"headers": map[string]string{"Content-Type": "text/plain"}}
	sendCost(t, r.g, plain) // the first of a size grows the buffers
	f, control := sendCost(t, r.g, plain)
	wantCode(t, f, CodeDenied)
	// In JSON a part of no headers is 16 bytes, a header line 6.
	for name, params := range map[string]map[string]any{
		"tiny parts":   form(room/16, 0, "PATCH"),
		"header lines": form(room/6020, 1000, "PATCH"),
	} {
		f, cost := sendCost(t, r.g, params)
		t.Logf("%s: %s; a plain frame %s", name, cost, control)
		wantCode(t, f, CodeDenied)
		cost.within(t, name, control)
	}

	// The parts a form may have are all read: the last one's _method
	// counts. (Its part is one more, of one header line.)
	wantCode(t, r.g.call("request.send", form(maxFormParts-1, 0, "DELETE")), CodeDenied)
	decodeResult(t, r.g.call("request.send", form(maxFormParts-1, 0, "POST")))
	decodeResult(t, r.g.call("request.send", form(10, maxFormHeaders/10-1, "POST")))
	for name, params := range map[string]map[string]any{
		"parts":        form(maxFormParts, 0, "POST"),
		"header lines": form(10, maxFormHeaders/10, "POST"),
	} {
		f := r.g.call("request.send", params)
		wantCode(t, f, CodeDenied)
		if !strings.Contains(f.Error.Message, "more than") || !strings.Contains(f.Error.Message, name) {
			t.Errorf("a form of too many %s: refusal %q does not name them", name, f.Error.Message)
		}
	}
	r.finish(t)
	if n := hits.Load(); n != 2 {
		t.Errorf("the origin got %d requests, want the 2 of forms within the caps", n)
	}
}

// TestRequestHeadersDecodedBounded: request.send's headers were decoded
// whole before their count was checked, in the session's read loop: a
// frame of a headers object of 280,000 names cost the daemon an
// allocation or two a name, 48 MB, twice a plain frame's CPU, for a call
// refused at the 65th. The decoding stops there.
func TestRequestHeadersDecodedBounded(t *testing.T) {
	noLeak(t)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	r := requestSession(t, &RequestCapability{URLs: []string{srv.URL}, Methods: []string{"POST"}}, PermissiveCeiling(), nil)
	room := DefaultMaxFrame - 4<<10
	plain := map[string]any{"url": srv.URL + "/?_method=PATCH", "method": "POST", "body": strings.Repeat("a", room),
		"headers": map[string]string{"Content-Type": "text/plain"}}
	sendCost(t, r.g, plain)
	f, control := sendCost(t, r.g, plain)
	wantCode(t, f, CodeDenied)
	many := map[string]string{}
	for i := 0; len(many)*15 < room; i++ { // `"h123456":"",` is 13 bytes
		many["h"+strconv.Itoa(i)] = ""
	}
	f, cost := sendCost(t, r.g, map[string]any{"url": srv.URL + "/", "method": "POST", "headers": many})
	t.Logf("%d headers: %s; a plain frame %s; %s", len(many), cost, control, f.Error.Message)
	wantCode(t, f, CodeTooLarge)
	if !strings.Contains(f.Error.Message, "headers") || !strings.Contains(f.Error.Message, "at most 64") {
		t.Errorf("refusal %q does not name headers and their cap", f.Error.Message)
	}
	cost.within(t, "a headers object of many names", control)
	r.finish(t)
}

// TestRequestOverrideScanCheap: looking through a query, a URL-encoded
// form or a JSON body for _method costs the daemon about what reading the
// frame does. A name with an escape was decoded on the heap to be
// compared, an allocation or three a field or member, in the session's
// read loop: a frame of such names cost the daemon a million allocations
// and two or three times a plain frame's CPU.
func TestRequestOverrideScanCheap(t *testing.T) {
	noLeak(t)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	r := requestSession(t, &RequestCapability{URLs: []string{srv.URL}, Methods: []string{"POST"}}, PermissiveCeiling(), nil)
	room := DefaultMaxFrame - 4<<10
	// Each call names an undeclared method in its query, after its body
	// is looked through.
	call := func(query, body, ct string) map[string]any {
		return map[string]any{"url": srv.URL + "/?" + query + "_method=PATCH", "method": "POST", "body": body,
			"headers": map[string]string{"Content-Type": ct}}
	}
	plain := call("", strings.Repeat("a", room), "text/plain")
	sendCost(t, r.g, plain)
	f, control := sendCost(t, r.g, plain)
	wantCode(t, f, CodeDenied)
	// Sizes are of the frame's JSON, where '&' is six bytes (";" splits
	// fields too) and a backslash two.
	for name, params := range map[string]map[string]any{
		"form of escaped names":       call("", strings.Repeat("%41=;", room/5), "application/x-www-form-urlencoded"),
		"form of spaces":              call("", strings.Repeat("+=;", room/3), "application/x-www-form-urlencoded"),
		"query of escaped names":      call(strings.Repeat("%41=;", room/5), "", "text/plain"),
		"JSON of escaped keys":        call("", "{"+strings.Repeat(`"\u005f":0,`, room/16)+`"a":0}`, "application/json"),
		"JSON of escaped backslashes": call("", "{"+strings.Repeat(`"\\":0,`, room/12)+`"a":0}`, "application/json"),
		// Every _method field or member names a declared method (in a
		// case the check folds), and each was kept in a list to the end.
		"form of allowed _method fields":  call("", strings.Repeat("_method=post;", room/13), "application/x-www-form-urlencoded"),
		"form of escaped _method values":  call("", strings.Repeat("_method=%50OST;", room/15), "application/x-www-form-urlencoded"),
		"query of allowed _method fields": call(strings.Repeat("_method=post;", room/13), "", "text/plain"),
		"JSON of allowed _method members": call("", "{"+strings.Repeat(`"_method":"post",`, room/22)+`"a":0}`, "application/json"),
		"JSON of escaped _method values":  call("", "{"+strings.Repeat(`"_method":"\u0050OST",`, room/30)+`"a":0}`, "application/json"),
	} {
		f, cost := sendCost(t, r.g, params)
		t.Logf("%s: %s; a plain frame %s", name, cost, control)
		wantCode(t, f, CodeDenied)
		cost.within(t, name, control)
	}
	r.finish(t)
}

// callCost is what one call cost the test process (the daemon's side and
// the guest's reading of the reply).
type callCost struct {
	cpu    time.Duration
	allocs uint64 // heap objects allocated
	bytes  uint64 // heap bytes allocated
}

func (c callCost) String() string {
	return fmt.Sprintf("%s of CPU, %d allocations, %d MiB", c.cpu.Round(time.Millisecond), c.allocs, c.bytes>>20)
}

// within fails t when c cost the host markedly more than control, a call
// of a plain frame of the same size. It compares allocations, which the
// race detector and a busy machine leave nearly as they are: each is CPU
// time in the read loop, and unbounded parsing is one or more a unit.
func (c callCost) within(t *testing.T, name string, control callCost) {
	t.Helper()
	if c.allocs > control.allocs+25000 || c.bytes > control.bytes+16<<20+raceSlack {
		t.Errorf("%s cost the host %s, a plain frame of its size %s", name, c, control)
	}
}

// sendCost makes a request.send call of params and returns its reply and
// what it cost; the frame is encoded, type first, before counting starts.
func sendCost(t *testing.T, g *testGuest, params any) (hostFrame, callCost) {
	t.Helper()
	g.nextID++
	body, err := json.Marshal(struct {
		Type   string `json:"type"`
		ID     uint64 `json:"id"`
		Method string `json:"method"`
		Params any    `json:"params"`
	}{"call", g.nextID, "request.send", params})
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > DefaultMaxFrame {
		t.Fatalf("the call's frame is %d bytes, over the cap", len(body))
	}
	frame := frameBytes(string(body))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cpu := processCPU(t)
	if _, err := g.conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	f := g.recv()
	cpu = processCPU(t) - cpu
	runtime.ReadMemStats(&after)
	if f.ID != g.nextID {
		t.Fatalf("reply %+v, want one to call %d", f, g.nextID)
	}
	return f, callCost{cpu: cpu, allocs: after.Mallocs - before.Mallocs, bytes: after.TotalAlloc - before.TotalAlloc}
}

// TestGuestHeaderRules: forwarding headers are dropped and the guest's
// headers are capped in count and bytes.
func TestGuestHeaderRules(t *testing.T) {
	noLeak(t)
	var got http.Header
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	r := requestSession(t, &RequestCapability{URLs: []string{srv.URL}}, PermissiveCeiling(), nil)
	decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "headers": map[string]string{
		"X-Forwarded-For": "10.0.0.1", "x-forwarded-host": "admin", "X-Forwarded-Proto": "https", "X-Real-IP": "10.0.0.1",
		"Forwarded": "for=10.0.0.1", "True-Client-IP": "10.0.0.1", "Authorization": "Bearer mine", "X-Kept": "1"}}))
	mu.Lock()
	for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "Forwarded", "True-Client-Ip"} {
		if got.Get(k) != "" {
			t.Errorf("%s reached the origin", k)
		}
	}
	if got.Get("Authorization") != "Bearer mine" || got.Get("X-Kept") != "1" {
		t.Errorf("the origin got %v", got)
	}
	mu.Unlock()
	// CGI-style servers (Go's net/http/cgi, FastCGI front ends) name a
	// header's variable with '-' read as '_', so X_Real_IP is X-Real-IP
	// to them; and a bare Proxy header is their HTTP_PROXY (httpoxy).
	decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "headers": map[string]string{
		"X_Forwarded_For": "10.0.0.1", "X_Real_IP": "10.0.0.1", "True_Client_IP": "10.0.0.1", "Proxy": "http://10.0.0.1:3128",
		"Proxy_Authorization": "Basic bWluZQ==", "X-Kept": "1"}}))
	mu.Lock()
	for _, k := range []string{"X_forwarded_for", "X_real_ip", "True_client_ip", "Proxy", "Proxy_authorization"} {
		if v := got.Values(k); len(v) > 0 {
			t.Errorf("%s reached the origin: %q", k, v)
		}
	}
	if got.Get("X-Kept") != "1" {
		t.Errorf("the origin got %v", got)
	}
	mu.Unlock()

	many := map[string]string{}
	for i := range MaxGuestHeaders + 1 {
		many["X-H"+strconv.Itoa(i)] = "v"
	}
	wantCode(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "headers": many}), CodeTooLarge)
	delete(many, "X-H0")
	decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "headers": many}))
	big := map[string]string{"X-Big": strings.Repeat("b", MaxGuestHeaderBytes)}
	wantCode(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "headers": big}), CodeTooLarge)
	r.finish(t)
}

// TestLogScrubbed: a secret the guest pieced together does not reach the
// run's logs.
func TestLogScrubbed(t *testing.T) {
	noLeak(t)
	ceil := PermissiveCeiling()
	ceil.Secrets = map[string]Secret{"api": {Value: `Bearer tok"en-123456`, Origins: []string{"https://api.example.com"}}}
	r := startServe(t, context.Background(), SessionConfig{Capabilities: Capabilities{Log: true}, Ceiling: ceil})
	wantOK(t, r.g.call("log.info", map[string]any{"message": `got Bearer tok"en-123456`, "meta": map[string]string{"v": `tok"en-123456`, "w": `Bearer tok"en-123456`}}))
	out := r.finish(t)
	if len(out.Logs) != 1 || strings.Contains(out.Logs[0].Message, "en-123456") || strings.Contains(string(out.Logs[0].Meta), "en-123456") || !json.Valid(out.Logs[0].Meta) {
		t.Errorf("logs %+v", out.Logs)
	}
}

// An address of this host's own interfaces is at least private, whatever
// its range: a declared name that resolves to the daemon's host reaches the
// services it runs on every interface. The test gives the loopback of a
// network namespace of its own a public address, from a locked thread
// that is thrown away after.
func TestOwnAddressesArePrivate(t *testing.T) {
	testenv.RequireRoot(t)
	public := netip.MustParseAddr("100.0.0.7")
	if classify(public) != addrPublic {
		t.Fatalf("%v is not a public address to start from", public)
	}
	errs := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and its
		// network namespace with it.
		runtime.LockOSThread()
		errs <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return err
			}
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: public.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
				return err
			}
			own.mu.Lock()
			own.addrs = nil // read this namespace's, not the cached host's
			own.mu.Unlock()
			defer func() {
				own.mu.Lock()
				own.addrs = nil
				own.mu.Unlock()
			}()
			if c := classify(public); c != addrPrivate {
				return fmt.Errorf("%v, an address of this host, classified %v", public, c)
			}
			if addrAllowed(public, false, false) {
				return fmt.Errorf("%v, an address of this host, allowed without the operator naming it", public)
			}
			return nil
		}()
	}()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// TestSecretHopDropsRangeAndEncoding: a request that carries a secret goes
// without the guest's Range, If-Range and Accept-Encoding, with which an
// origin that echoes the secret could hand it back in slices shorter than
// any form the scrubber knows, or compressed past it. Without a secret
// they pass.
func TestSecretHopDropsRangeAndEncoding(t *testing.T) {
	noLeak(t)
	var mu sync.Mutex
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	ceil := PermissiveCeiling()
	ceil.Secrets = map[string]Secret{"api": {Value: "Bearer tok-0123456789", Origins: []string{srv.URL}}}
	ceil, err := ceil.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	caps := Capabilities{Request: &RequestCapability{URLs: []string{srv.URL}, Auth: map[string]string{srv.URL: "api"}}}
	r := startServe(t, context.Background(), SessionConfig{Capabilities: caps, Ceiling: ceil})
	// Accept-Encoding "br": the transport asks for gzip itself when the guest
	// asks for nothing, and then decodes it before the scrubber reads it.
	asked := map[string]string{"Range": "bytes=7-9", "If-Range": `"x"`, "Accept-Encoding": "br"}
	wantOK(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "auth": "api", "headers": asked}))
	wantOK(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "headers": asked}))
	r.finish(t)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("the origin got %d requests, want 2", len(got))
	}
	for k, v := range asked {
		if h := got[0].Get(k); h == v {
			t.Errorf("with the secret, the origin got the guest's %s: %q", k, h)
		}
		if h := got[1].Get(k); h != v {
			t.Errorf("without a secret, the origin got %s %q, want the guest's %q", k, h, v)
		}
	}
}

// TestMethodOverrideBodyCheckedOnce: a body's _method fields are looked
// for once a call, not again at each redirect hop that resends it (a 307
// or 308 keeps the body): a 3 MiB JSON body of 500,000 members costs the
// daemon ~0.2 s to look through, none of it the run's CPU time, and five
// redirects made it six times that.
func TestMethodOverrideBodyCheckedOnce(t *testing.T) {
	noLeak(t)
	var hops atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if hops.Add(1)%6 != 0 {
			http.Redirect(w, r, "/again", http.StatusTemporaryRedirect)
		}
	}))
	t.Cleanup(srv.Close)
	body := base64.StdEncoding.EncodeToString([]byte(`{` + strings.Repeat(`"a":0,`, (DefaultMaxFrame*3/4-1024)/6) + `"b":1}`))
	// The call's CPU, for a body of type ct, through six hops.
	call := func(ct string) time.Duration {
		t.Helper()
		r := requestSession(t, &RequestCapability{URLs: []string{srv.URL}, Methods: []string{"POST"}}, PermissiveCeiling(), nil)
		before := processCPU(t)
		res := decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "method": "POST",
			"body": body, "body_encoding": "base64", "headers": map[string]string{"Content-Type": ct}}))
		cpu := processCPU(t) - before
		r.finish(t)
		if res.Status != 200 || hops.Load()%6 != 0 {
			t.Fatalf("status %d after %d hops, want 200 after 6", res.Status, hops.Load())
		}
		return cpu
	}
	// The same call with a body no rule looks through is the control:
	// what the hops, the transfers and the origin cost (several times
	// more under the race detector), beside which a look per hop shows.
	// The least of three calls each, in turns: CPU time a call was
	// charged for others' work (the collector, the scheduler) drops out.
	cpu, control := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range 3 {
		control = min(control, call("application/octet-stream"))
		cpu = min(cpu, call("application/json"))
	}
	raw, _ := base64.StdEncoding.DecodeString(body)
	single := time.Now()
	if _, _, err := deniedOverride(http.Header{"Content-Type": {"application/json"}}, string(raw), []string{"POST"}); err != nil {
		t.Fatal(err)
	}
	once := time.Since(single)
	t.Logf("a call of 6 hops took %s of CPU with a JSON body, %s with a body not looked through; one look %s", cpu, control, once)
	// A look per hop would cost six looks over the control; once, one.
	if cpu > control+3*once+30*time.Millisecond {
		t.Errorf("a call of 6 hops took %s of CPU with a JSON body and %s without, where one look through its body takes %s", cpu, control, once)
	}
}

// TestSecretScrubbedInEscapedSlashes: PHP's json_encode, the usual way a
// PHP origin echoes what it got, writes '/' as `\/`, and base64 tokens
// and keys hold '/' often: the JSON the guest decodes from such a body
// must not hold the secret.
func TestSecretScrubbedInEscapedSlashes(t *testing.T) {
	noLeak(t)
	const value = "Bearer tok/9f8e7d+6c5b4a/zz=="
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, _ := json.Marshal(map[string]string{"authorization": r.Header.Get("Authorization")})
		_, _ = w.Write(bytes.ReplaceAll(q, []byte("/"), []byte(`\/`)))
	}))
	t.Cleanup(srv.Close)
	ceil := PermissiveCeiling()
	ceil.Secrets = map[string]Secret{"api": {Value: value, Origins: []string{srv.URL}}}
	caps := Capabilities{Request: &RequestCapability{URLs: []string{srv.URL}, Auth: map[string]string{srv.URL: "api"}}}
	r := startServe(t, context.Background(), SessionConfig{Capabilities: caps, Ceiling: ceil})
	res := decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "auth": "api"}))
	r.finish(t)
	var echoed map[string]string
	if err := json.Unmarshal([]byte(res.Body), &echoed); err != nil {
		t.Fatalf("body %q: %v", res.Body, err)
	}
	if got := echoed["authorization"]; strings.Contains(got, "tok/9f8e7d") {
		t.Errorf("the guest decoded the secret from %q: %q", res.Body, got)
	}
}

// TestSecretScrubbedInsideBase64: an origin that hands back what it got
// base64-encoded (a request dump, a token that wraps the header) encodes
// the secret at whatever offset it falls in the dump, where its base64 is
// none of the forms the whole value encodes to: the guest decoding the
// body must not find the secret.
func TestSecretScrubbedInsideBase64(t *testing.T) {
	noLeak(t)
	const token = "tok_9f8e7d6c5b4a3f2e1d0c"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, pad := range []string{"", "x", "xy"} {
			dump := pad + "Authorization: " + r.Header.Get("Authorization") + "\r\nHost: " + r.Host + "\r\n"
			fmt.Fprintln(w, base64.StdEncoding.EncodeToString([]byte(dump)))
			fmt.Fprintln(w, base64.RawURLEncoding.EncodeToString([]byte(dump)))
		}
	}))
	t.Cleanup(srv.Close)
	ceil := PermissiveCeiling()
	ceil.Secrets = map[string]Secret{"api": {Value: "Bearer " + token, Origins: []string{srv.URL}}}
	caps := Capabilities{Request: &RequestCapability{URLs: []string{srv.URL}, Auth: map[string]string{srv.URL: "api"}}}
	r := startServe(t, context.Background(), SessionConfig{Capabilities: caps, Ceiling: ceil})
	res := decodeResult(t, r.g.call("request.send", map[string]any{"url": srv.URL + "/", "auth": "api"}))
	r.finish(t)
	lines := strings.Fields(res.Body)
	if len(lines) != 6 {
		t.Fatalf("body %q", res.Body)
	}
	for i, line := range lines {
		enc := base64.StdEncoding
		if i%2 == 1 {
			enc = base64.RawURLEncoding
		}
		// What decodes of the line, as a guest would take it apart: each
		// run of base64 between the scrubber's marks.
		for _, part := range strings.Split(line, "[redacted]") {
			for skip := range 4 {
				if skip > len(part) {
					break
				}
				p := part[skip:]
				p = p[:len(p)/4*4]
				raw, _ := enc.Strict().DecodeString(strings.TrimRight(p, "="))
				if enc == base64.StdEncoding {
					raw, _ = base64.StdEncoding.DecodeString(p)
				}
				if strings.Contains(string(raw), token[:12]) || strings.Contains(string(raw), token[8:]) {
					t.Errorf("line %d %q decodes to %q, which holds the secret", i, line, raw)
				}
			}
		}
	}
}
