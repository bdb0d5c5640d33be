package ipc

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/strictjson"
)

// Capabilities is what a job declares it needs from the broker. The zero
// value grants nothing but input.get, which every job has.
type Capabilities struct {
	Log     bool               `json:"log,omitempty"`
	Request *RequestCapability `json:"request,omitempty"`
}

// RequestCapability lets the guest make HTTP requests to a fixed list of
// origins.
type RequestCapability struct {
	// URLs are bare origins ("https://api.example.com", "http://10.0.0.5:8080").
	URLs []string `json:"urls"`
	// Methods the guest may use; empty means GET only.
	Methods []string `json:"methods,omitempty"`
	// Auth maps an origin (one of URLs) to the name of an operator secret
	// the guest may ask the broker to inject there. The guest names the
	// secret; it never sees its value.
	Auth map[string]string `json:"auth,omitempty"`
}

// AllMethods are the HTTP methods a capability may name.
var AllMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}

var errNotOrigin = errors.New("is not a bare origin")

// Validate checks the declared set on its own, before any ceiling applies.
// Errors are *strictjson.Error, naming the field at fault the way the job
// JSON spells it.
func (c *Capabilities) Validate() error {
	if c == nil || c.Request == nil {
		return nil
	}
	r := c.Request
	if len(r.URLs) == 0 {
		return strictjson.Errorf("capabilities.request.urls", "at least one origin is required")
	}
	switch {
	case len(r.URLs) > api.MaxOrigins:
		return strictjson.Errorf("capabilities.request.urls", "%d origins is over the cap of %d", len(r.URLs), api.MaxOrigins)
	case len(r.Methods) > api.MaxMethods:
		return strictjson.Errorf("capabilities.request.methods", "%d methods is over the cap of %d", len(r.Methods), api.MaxMethods)
	case len(r.Auth) > api.MaxOrigins:
		return strictjson.Errorf("capabilities.request.auth", "%d origins is over the cap of %d", len(r.Auth), api.MaxOrigins)
	}
	seen := map[string]bool{}
	for i, u := range r.URLs {
		o, err := NormalizeOrigin(u)
		if err != nil {
			return strictjson.Errorf(fmt.Sprintf("capabilities.request.urls[%d]", i), "%w", err)
		}
		seen[o] = true
	}
	for i, m := range r.Methods {
		if !slices.Contains(AllMethods, m) {
			return strictjson.Errorf(fmt.Sprintf("capabilities.request.methods[%d]", i), "%q is not one of %s", m, strings.Join(AllMethods, " "))
		}
	}
	authKey := map[string]string{} // normalised origin → the key naming it
	for _, origin := range sortedKeys(r.Auth) {
		o, err := NormalizeOrigin(origin)
		if err != nil {
			return strictjson.Errorf(fmt.Sprintf("capabilities.request.auth[%q]", origin), "%w", err)
		}
		if !seen[o] {
			return strictjson.Errorf(fmt.Sprintf("capabilities.request.auth[%q]", origin), "origin is not in capabilities.request.urls")
		}
		// Two keys for one origin would leave which secret goes there to
		// map order.
		if prev, dup := authKey[o]; dup {
			return strictjson.Errorf(fmt.Sprintf("capabilities.request.auth[%q]", origin), "the same origin (%s) as capabilities.request.auth[%q]; name each origin once", o, prev)
		}
		authKey[o] = origin
		if r.Auth[origin] == "" {
			return strictjson.Errorf(fmt.Sprintf("capabilities.request.auth[%q]", origin), "empty secret name")
		}
	}
	return nil
}

// methods returns the declared methods, defaulting to GET.
func (r *RequestCapability) methods() []string {
	if len(r.Methods) == 0 {
		return []string{"GET"}
	}
	return r.Methods
}

// origins returns the declared origins normalised; Validate must have passed.
func (r *RequestCapability) origins() map[string]bool {
	return normalizeOrigins(r.URLs)
}

// auth returns the declared auth map keyed by normalised origin; Validate
// must have passed (so no two keys share an origin).
func (r *RequestCapability) auth() map[string]string {
	out := make(map[string]string, len(r.Auth))
	for o, name := range r.Auth {
		if n, err := NormalizeOrigin(o); err == nil {
			out[n] = name
		}
	}
	return out
}

// NormalizeOrigin checks that s is a bare http(s) origin — scheme, host and
// optional port; no userinfo, path (a lone "/" is tolerated), query or
// fragment — and returns it in canonical form: lower-case scheme and host,
// default port dropped, IPv6 in brackets.
func NormalizeOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%q %w: %v", s, errNotOrigin, unwrapURLError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" { // url.Parse lower-cases the scheme
		return "", fmt.Errorf("%q %w: the scheme must be http or https", s, errNotOrigin)
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || strings.Contains(s, "#") || u.Host == "" {
		return "", fmt.Errorf("%q %w", s, errNotOrigin)
	}
	return originOf(u)
}

// originOf returns the canonical origin of an absolute http(s) URL.
func originOf(u *url.URL) (string, error) {
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", fmt.Errorf("%q has no host", u.Redacted())
	}
	port := u.Port()
	if port == "" && strings.HasSuffix(u.Host, ":") {
		return "", fmt.Errorf("%q has an empty port", u.Redacted())
	}
	if port != "" {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return "", fmt.Errorf("%q has an invalid port %q", u.Redacted(), port)
		}
		port = strconv.FormatUint(p, 10)
	}
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	h := host
	if strings.Contains(host, ":") {
		h = "[" + host + "]"
	}
	if port != "" {
		h = net.JoinHostPort(host, port)
	}
	return scheme + "://" + h, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// ParseCapFlag adds one CLI --cap flag to into. Forms:
//
//	log
//	request=https://a.example[,https://b.example][:GET,POST]
//
// The origin itself contains colons (and maybe a port), so the part after
// the last colon is taken as the method list only when every comma-separated
// item in it is an upper-case method name: "request=http://127.0.0.1:8080"
// has no method list, "request=http://127.0.0.1:8080:GET" has one. Repeated
// request flags add origins and methods.
func ParseCapFlag(s string, into *Capabilities) error {
	name, arg, hasArg := strings.Cut(s, "=")
	switch name {
	case "log":
		if hasArg {
			return fmt.Errorf("--cap %q: log takes no value", s)
		}
		into.Log = true
		return nil
	case "request":
	default:
		return fmt.Errorf("--cap %q: unknown capability %q (want log or request=ORIGINS[:METHODS])", s, name)
	}
	if !hasArg || arg == "" {
		return fmt.Errorf("--cap %q: request needs origins, e.g. request=https://api.example.com:GET,POST", s)
	}
	var methods []string
	if i := strings.LastIndexByte(arg, ':'); i >= 0 {
		if ms := strings.Split(arg[i+1:], ","); allMethods(ms) {
			methods, arg = ms, arg[:i]
		}
	}
	add := &RequestCapability{}
	for o := range strings.SplitSeq(arg, ",") {
		if _, err := NormalizeOrigin(o); err != nil {
			return fmt.Errorf("--cap %q: %w", s, err)
		}
		add.URLs = append(add.URLs, o)
	}
	if into.Request == nil {
		into.Request = &RequestCapability{}
	}
	r := into.Request
	for _, u := range add.URLs {
		if !slices.Contains(r.URLs, u) {
			r.URLs = append(r.URLs, u)
		}
	}
	for _, m := range methods {
		if !slices.Contains(r.Methods, m) {
			r.Methods = append(r.Methods, m)
		}
	}
	return nil
}

func allMethods(ms []string) bool {
	for _, m := range ms {
		if !slices.Contains(AllMethods, m) {
			return false
		}
	}
	return len(ms) > 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// originAddr returns the address of an origin whose host is a literal IP.
func originAddr(origin string) (netip.Addr, error) {
	u, err := url.Parse(origin)
	if err != nil {
		return netip.Addr{}, err
	}
	return netip.ParseAddr(u.Hostname())
}
