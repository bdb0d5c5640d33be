package ipc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pmjail/pmjail/internal/strictjson"
)

// maxRedirects is how many redirects request.send follows, each re-checked.
const maxRedirects = 5

// broker performs request.send for one run.
type broker struct {
	req      *RequestCapability // nil: no request capability
	origins  map[string]bool    // req's origins, normalised
	auth     map[string]string  // req's auth, by normalised origin
	ceil     Ceiling
	resolver Resolver
	rootCAs  *x509.CertPool
	log      *slog.Logger
	private  map[string]bool // the ceiling's PrivateOrigins, normalised
	scrubber *scrubber       // every secret value, to scrub from what leaves
	budget   *Budget         // the run's reply budget (reply.go); nil: none

	// transports hold the run's kept-alive connections, one transport per
	// origin and checked address: a call reuses a connection only to the
	// address its own lookup picked and the rules allowed.
	tmu        sync.Mutex
	transports map[string]*http.Transport
	// retired are the transports the run let go of at maxTransports.
	// Their idle connections were closed then, but a call may still be
	// under way on one: an HTTP/1 connection closes as it comes back
	// idle, an HTTP/2 one stays open for IdleConnTimeout, past the run's
	// end, unless closeTransports closes it too.
	retired []*http.Transport
}

// maxTransports bounds the transports a run keeps; past it they are all
// closed and the run starts over, so a guest cycling through origins
// holds no more than this many idle connections' worth at once.
const maxTransports = 16

// transport is the run's transport for origin at target (host:port),
// which dials nothing else.
func (b *broker) transport(origin, target string) *http.Transport {
	key := origin + " " + target
	b.tmu.Lock()
	defer b.tmu.Unlock()
	if tr := b.transports[key]; tr != nil {
		return tr
	}
	if len(b.transports) >= maxTransports {
		b.retireTransportsLocked()
	}
	dialer := &net.Dialer{}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", target)
		},
		TLSClientConfig:        &tls.Config{RootCAs: b.rootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: 64 << 10,
		IdleConnTimeout:        30 * time.Second,
	}
	if b.transports == nil {
		b.transports = map[string]*http.Transport{}
	}
	b.transports[key] = tr
	return tr
}

// closeTransports closes every idle connection the run keeps; the session
// calls it once no call is in flight any more.
func (b *broker) closeTransports() {
	b.tmu.Lock()
	defer b.tmu.Unlock()
	b.retireTransportsLocked()
	for _, tr := range b.retired {
		tr.CloseIdleConnections()
	}
	b.retired = nil
}

// retireTransportsLocked closes the idle connections of the run's
// transports and lets go of them, keeping them among the retired.
func (b *broker) retireTransportsLocked() {
	for _, tr := range b.transports {
		tr.CloseIdleConnections()
		b.retired = append(b.retired, tr)
	}
	clear(b.transports)
}

func newBroker(cfg SessionConfig, ceil Ceiling) *broker {
	b := &broker{req: cfg.Capabilities.Request, ceil: ceil, resolver: cfg.Resolver, rootCAs: cfg.RootCAs, log: cfg.Logger}
	if b.resolver == nil {
		b.resolver = net.DefaultResolver
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.req != nil {
		b.origins = b.req.origins()
		b.auth = b.req.auth()
	}
	b.private = ceil.privateOrigins()
	b.scrubber = newScrubber(ceil.Secrets)
	return b
}

type sendParams struct {
	URL          string         `json:"url"`
	Method       string         `json:"method"`
	Headers      guestHeaderMap `json:"headers"`
	Body         *string        `json:"body"`
	BodyEncoding string         `json:"body_encoding"`
	TimeoutMS    *float64       `json:"timeout_ms"`
	Auth         string         `json:"auth"`
}

// The body encodings of request.send (params body_encoding), which name
// how both bodies travel: text is a JSON string (a response's bytes that
// are not UTF-8 become U+FFFD), base64 carries any bytes, as fetch needs.
const (
	encodingText   = "text"
	encodingBase64 = "base64"
)

// The reply's body comes last: responseValue appends it to the rest.
type sendResult struct {
	Status       int               `json:"status"`
	StatusText   string            `json:"status_text,omitempty"` // the reason phrase, scrubbed
	Headers      map[string]string `json:"headers"`
	URL          string            `json:"url,omitempty"`        // the last hop's, when redirected
	Redirected   bool              `json:"redirected,omitempty"` // a redirect was followed
	BodyEncoding string            `json:"body_encoding,omitempty"`
	Body         string            `json:"body"`
}

// body decodes the request body as body_encoding says.
func (p *sendParams) body() (*string, *CallError) {
	switch p.BodyEncoding {
	case "", encodingText:
		return p.Body, nil
	case encodingBase64:
		if p.Body == nil {
			return nil, nil
		}
		raw, err := base64.StdEncoding.DecodeString(*p.Body)
		if err != nil {
			return nil, callErr(CodeInvalidRequest, "body: not valid base64 (body_encoding is base64): %v", err)
		}
		s := string(raw)
		return &s, nil
	}
	return nil, callErr(CodeInvalidRequest, "body_encoding %.40q: want %q or %q", p.BodyEncoding, encodingText, encodingBase64)
}

// hop is one request of a possibly redirected call.
type hop struct {
	method string
	url    *url.URL
	origin string
	header http.Header
	body   *string
	// forms is what checkOverride found in body, once a call: a hop that
	// resends the body (a 307 or 308) resends its Content-Type with it,
	// and looking through a large form or JSON body again at each hop
	// cost the daemon the look six times over. Nil until looked.
	forms *formCheck
}

// formCheck is the first _method field of a body under the Content-Types
// types that names a method the job may not use, or why the body cannot
// be checked (deniedOverride).
type formCheck struct {
	types  []string
	denied *string
	err    error
}

// checkForms looks through h's body for a _method field that names a
// method not in allowed, or takes what an earlier hop of the call found
// in the same body under the same types.
func checkForms(h hop, allowed []string) *formCheck {
	types := h.header.Values("Content-Type")
	if h.forms != nil && slices.Equal(h.forms.types, types) {
		return h.forms
	}
	c := &formCheck{types: types}
	v, denied, err := deniedOverride(h.header, *h.body, allowed)
	if denied {
		c.denied = &v
	}
	c.err = err
	return c
}

// sendCall is a request.send call whose params passed every check that
// needs no lookup: what exchange sends.
type sendCall struct {
	hop      hop
	urlLen   int     // the length of the URL the guest gave
	auth     string  // the secret's name, "" without one
	secret   *Secret // nil without one
	asBase64 bool    // the reply's body as base64
	timeout  time.Duration
}

// prepare is request.send up to the network: the params decoded and
// every check that needs no lookup done on them (origin, method,
// headers, secret, timeout, override), before anything leaves the host.
// It is quick and never waits, so the session runs it in its read loop:
// a refused call costs no goroutine, and the guest its reply sooner.
func (b *broker) prepare(raw json.RawMessage) (*sendCall, *CallError) {
	if b.req == nil {
		return nil, callErr(CodeDenied, "the job did not declare the request capability")
	}
	var p sendParams
	if err := strictjson.Decode(raw, &p); err != nil {
		if over, ok := errors.AsType[*headersCapError](err); ok {
			return nil, callErr(CodeTooLarge, "request params: headers: %v", over)
		}
		return nil, callErr(CodeInvalidRequest, "request params: %v", err)
	}
	body, cerr := p.body()
	if cerr != nil {
		return nil, cerr
	}
	method := strings.ToUpper(p.Method)
	if method == "" {
		method = "GET"
	}
	if !validHeaderName(method) {
		return nil, callErr(CodeInvalidRequest, "method %.40q is not a valid HTTP method", p.Method)
	}
	u, cerr := b.checkURL(p.URL)
	if cerr != nil {
		return nil, cerr
	}
	origin, _ := originOf(u)
	if cerr := b.checkTarget(origin, method); cerr != nil {
		return nil, cerr
	}

	var secret *Secret
	if p.Auth != "" {
		if b.auth[origin] != p.Auth {
			return nil, callErr(CodeDenied, "the job does not grant secret %.80q for %s", p.Auth, origin)
		}
		s, ok := b.ceil.Secrets[p.Auth]
		if !ok {
			return nil, callErr(CodeDenied, "no secret %.80q is configured", p.Auth)
		}
		if !s.sendsTo(origin) {
			return nil, callErr(CodeDenied, "secret %.80q may not be sent to %s", p.Auth, origin)
		}
		secret = &s
	}
	header, cerr := b.guestHeaders(p.Headers, origin)
	if cerr != nil {
		return nil, cerr
	}

	timeout := b.ceil.RequestTimeout
	if p.TimeoutMS != nil {
		ms := *p.TimeoutMS
		if math.IsNaN(ms) || ms < 0 {
			return nil, callErr(CodeInvalidRequest, "timeout_ms must be a non-negative number")
		}
		if ms > 0 && ms < float64(timeout/time.Millisecond) {
			timeout = time.Duration(ms * float64(time.Millisecond))
		}
	}

	h := hop{method: method, url: u, origin: origin, header: header, body: body}
	if body != nil {
		h.forms = checkForms(h, b.overrideMethods())
	}
	if cerr := b.checkOverride(h); cerr != nil {
		return nil, cerr
	}
	return &sendCall{hop: h, urlLen: len(p.URL), auth: p.Auth, secret: secret, asBase64: p.BodyEncoding == encodingBase64, timeout: timeout}, nil
}

// held is what the call holds in the daemon until it ends, of its body
// and its URL (maxHeldInFlight).
func (c *sendCall) held() int64 {
	n := urlCopies * int64(c.urlLen)
	if c.hop.body != nil {
		n += int64(len(*c.hop.body))
	}
	return n
}

// exchange is the rest of request.send: the lookup, the address check,
// the request and its redirects, each re-checked, within the call's
// timeout.
func (b *broker) exchange(ctx context.Context, c *sendCall) (json.RawMessage, *CallError) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, cerr := b.follow(ctx, c.hop, c.auth, c.secret, c.asBase64)
	if cerr != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && cerr.Code == CodeInternal {
			cerr = callErr(CodeTimeout, "the request took longer than %s", c.timeout)
		}
		cerr.Message = b.scrub(cerr.Message)
		return nil, cerr
	}
	return res, nil
}

// checkURL parses a URL the guest named (or a server redirected to).
func (b *broker) checkURL(s string) (*url.URL, *CallError) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, callErr(CodeInvalidRequest, "url: %v", unwrapURLError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, callErr(CodeDenied, "url %.200q: only http and https URLs are allowed", u.Redacted())
	}
	if u.User != nil {
		return nil, callErr(CodeDenied, "url %.200q: URLs with credentials are refused", u.Redacted())
	}
	if u.Host == "" || u.Opaque != "" {
		return nil, callErr(CodeInvalidRequest, "url %.200q has no host", u.Redacted())
	}
	if _, err := originOf(u); err != nil {
		return nil, callErr(CodeInvalidRequest, "url: %v", err)
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// checkTarget: the origin must be declared and the method allowed for it.
func (b *broker) checkTarget(origin, method string) *CallError {
	if !b.origins[origin] {
		return callErr(CodeDenied, "origin %.200s is not declared in capabilities.request.urls", origin)
	}
	if !slices.Contains(b.req.methods(), method) {
		return callErr(CodeDenied, "method %s is not declared in capabilities.request.methods", method)
	}
	if b.ceil.Methods != nil && !slices.Contains(b.ceil.Methods, method) {
		return callErr(CodeDenied, "method %s is not allowed by the operator", method)
	}
	return nil
}

// guestHeaders validates and filters the headers the guest asked for,
// which their decoding held to the caps on count and bytes
// (guestHeaderMap).
func (b *broker) guestHeaders(in guestHeaderMap, origin string) (http.Header, *CallError) {
	h := make(http.Header, len(in))
	reserved := b.reserved(origin)
	for _, k := range sortedKeys(in) {
		v := in[k]
		if !validHeaderName(k) {
			return nil, callErr(CodeInvalidRequest, "header name %.80q is not valid", k)
		}
		if !validHeaderValue(v) {
			return nil, callErr(CodeInvalidRequest, "header %s: the value holds control characters", k)
		}
		ck, name := http.CanonicalHeaderKey(k), cgiName(k)
		if dropHeader(name) {
			continue
		}
		if slices.Contains(reserved, name) {
			return nil, callErr(CodeDenied, "header %s is reserved on %s, where the broker injects credentials", ck, origin)
		}
		h.Add(ck, v)
	}
	// Content-Type holds one value (RFC 9110). Given more than once (names
	// that differ in case), a server may read any of them, and the broker
	// reads the body for a _method field as each (deniedOverride), in the
	// session's read loop, on CPU time no run counts: each copy cost the
	// daemon the body's whole parse again, so one frame of a large
	// multipart body cost it many times what the guest paid to write it.
	if n := len(h.Values("Content-Type")); n > 1 {
		return nil, callErr(CodeInvalidRequest, "header Content-Type is given %d times (names that differ in case): a request has one", n)
	}
	return h, nil
}

// reserved lists the headers the guest may not set on origin: none, or,
// where the broker injects a secret, the credential headers and the
// secret's own.
func (b *broker) reserved(origin string) []string {
	name := b.auth[origin]
	if name == "" {
		return nil
	}
	reserved := slices.Clone(credentialHeaders)
	if s, ok := b.ceil.Secrets[name]; ok {
		reserved = append(reserved, http.CanonicalHeaderKey(s.header()))
	}
	return reserved
}

// follow performs the request and up to maxRedirects redirects, each target
// re-checked against the declared origins, methods and address rules.
// With asBase64 the reply's body is base64.
func (b *broker) follow(ctx context.Context, h hop, authName string, secret *Secret, asBase64 bool) (json.RawMessage, *CallError) {
	for redirects := 0; ; redirects++ {
		header := h.header.Clone()
		if secret != nil && b.auth[h.origin] == authName {
			// Checked on every hop: a redirect must not carry the secret
			// to an origin the operator did not name for it.
			if !secret.sendsTo(h.origin) {
				return nil, callErr(CodeDenied, "redirect to %.200s: secret %.80q may not be sent there", h.origin, authName)
			}
			header.Set(secret.header(), secret.Value)
			// An origin that echoes the secret back must hand it over
			// whole and decoded, as the scrubber can find it: not in
			// ranges shorter than any form it knows, nor compressed.
			delHeaders(header, secretHopDropped)
		}
		resp, cerr := b.roundTrip(ctx, h, header)
		if cerr != nil {
			return nil, cerr
		}
		next, isRedirect, cerr := b.redirect(resp, h)
		if !isRedirect || cerr != nil {
			if cerr != nil {
				drainClose(resp)
				return nil, cerr
			}
			shape := sendResult{Status: resp.StatusCode, StatusText: b.scrub(reasonPhrase(resp))}
			if redirects > 0 {
				// Where a redirect led can name what a server echoed.
				shape.URL, shape.Redirected = b.scrub(h.url.String()), true
			}
			if asBase64 {
				shape.BodyEncoding = encodingBase64
			}
			return b.readResponse(ctx, resp, shape)
		}
		drainClose(resp)
		if redirects == maxRedirects {
			return nil, callErr(CodeDenied, "more than %d redirects", maxRedirects)
		}
		h = next
	}
}

// redirect works out where a 3xx response points and whether going there
// is allowed. It changes the method as browsers do: 303 (and 301/302 after
// a POST) becomes GET without a body.
func (b *broker) redirect(resp *http.Response, cur hop) (hop, bool, *CallError) {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return hop{}, false, nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return hop{}, false, nil // a 3xx without a target is a final answer
	}
	ref, err := cur.url.Parse(loc)
	if err != nil {
		return hop{}, true, callErr(CodeInvalidRequest, "redirect location: %v", unwrapURLError(err))
	}
	u, cerr := b.checkURL(ref.String())
	if cerr != nil {
		cerr.Message = "redirect: " + cerr.Message
		return hop{}, true, cerr
	}
	origin, _ := originOf(u)
	next := hop{method: cur.method, url: u, origin: origin, header: cur.header.Clone(), body: cur.body, forms: cur.forms}
	if resp.StatusCode == http.StatusSeeOther && cur.method != "HEAD" ||
		(resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusFound) && cur.method == "POST" {
		next.method, next.body, next.forms = "GET", nil, nil
		next.header.Del("Content-Type")
	}
	if origin != cur.origin {
		// The guest's own credentials were meant for the origin it named;
		// where the broker injects a secret, the guest may not set the
		// secret's header either (guestHeaders), by a redirect no more
		// than by a call.
		delHeaders(next.header, append(b.reserved(origin), credentialHeaders...))
	}
	cerr = b.checkTarget(origin, next.method)
	if cerr == nil {
		cerr = b.checkOverride(next)
	}
	if cerr != nil {
		cerr.Message = "redirect to " + u.Redacted() + ": " + cerr.Message
		return hop{}, true, cerr
	}
	return next, true, nil
}

// roundTrip resolves the host once, checks the address, and sends the
// request over a connection pinned to that address: no second lookup a
// rebinding DNS server could answer differently, and no proxy from the
// environment. The connection is kept for the run's later calls to the
// same origin whose lookup picks the same address (a dial and, for
// HTTPS, a handshake saved per call); Serve closes them as it returns.
func (b *broker) roundTrip(ctx context.Context, h hop, header http.Header) (*http.Response, *CallError) {
	addr, cerr := b.pickAddr(ctx, h.url, h.origin)
	if cerr != nil {
		return nil, cerr
	}
	port := h.url.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[h.url.Scheme]
	}
	target := net.JoinHostPort(addr.String(), port)
	tr := b.transport(h.origin, target)
	var body io.Reader
	if h.body != nil {
		body = strings.NewReader(*h.body)
	}
	req, err := http.NewRequestWithContext(ctx, h.method, h.url.String(), body)
	if err != nil {
		return nil, callErr(CodeInvalidRequest, "build request: %v", err)
	}
	req.Header = header
	resp, err := tr.RoundTrip(req)
	if err != nil {
		b.log.Debug("ipc request", "method", h.method, "origin", h.origin, "addr", target, "err", b.scrubber.scrub(err.Error()))
		return nil, b.netErr(ctx, err)
	}
	b.log.Debug("ipc request", "method", h.method, "origin", h.origin, "addr", target, "status", resp.StatusCode)
	return resp, nil
}

// pickAddr resolves the URL's host and returns the first address the rules
// allow; a literal IP host is its own address, judged like a resolved one
// unless the operator named its origin (PrivateOrigins, or the CLI's
// TrustDeclaredLiterals).
func (b *broker) pickAddr(ctx context.Context, u *url.URL, origin string) (netip.Addr, *CallError) {
	host := u.Hostname()
	named := b.private[origin]
	if a, err := netip.ParseAddr(host); err == nil {
		if err := b.ceil.literalAllowed(origin, a); err != nil {
			return netip.Addr{}, callErr(CodeDenied, "address %v", err)
		}
		return a.Unmap(), nil
	}
	addrs, err := b.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return netip.Addr{}, callErr(CodeNotFound, "host %.200s not found", host)
		}
		return netip.Addr{}, b.netErr(ctx, fmt.Errorf("resolve %s: %w", host, err))
	}
	for _, a := range addrs {
		if addrAllowed(a, named, b.ceil.AllowPrivateAddresses) {
			return a.Unmap(), nil
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, callErr(CodeNotFound, "host %.200s has no addresses", host)
	}
	return netip.Addr{}, callErr(CodeDenied, "host %.200s resolves to %s, a private or reserved address", host, addrs[0])
}

// readResponse reads at most MaxResponseBytes of the body and encodes the
// reply's value, shape with the body, within the run's reply budget
// (responseValue).
func (b *broker) readResponse(ctx context.Context, resp *http.Response, shape sendResult) (json.RawMessage, *CallError) {
	defer resp.Body.Close()
	limit := b.ceil.MaxResponseBytes
	if resp.ContentLength > limit {
		return nil, callErr(CodeTooLarge, "the response body (%d bytes) is over the %d-byte cap", resp.ContentLength, limit)
	}
	return b.responseValue(ctx, resp, shape)
}

// netErr maps a transport failure to a reply error.
func (b *broker) netErr(ctx context.Context, err error) *CallError {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return callErr(CodeTimeout, "%s", unwrapURLError(err))
	case errors.Is(err, context.Canceled):
		return callErr(CodeInternal, "the run is ending")
	}
	return callErr(CodeInternal, "%s", unwrapURLError(err))
}

// scrub removes secret values from a message bound for the guest.
func (b *broker) scrub(msg string) string { return b.scrubber.scrub(msg) }

// reasonPhrase is the status line's text after its code ("OK" of
// "200 OK"), which net/http keeps only in Status.
func reasonPhrase(resp *http.Response) string {
	text, _ := strings.CutPrefix(resp.Status, strconv.Itoa(resp.StatusCode))
	return strings.TrimPrefix(text, " ")
}

// drainClose reads a little of an unwanted body so the close is clean.
func drainClose(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
}
