package ipc

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// droppedHeaders are never forwarded from the guest: hop-by-hop headers that
// would let it steer the connection, and those the transport owns.
var droppedHeaders = map[string]bool{
	"Connection":        true,
	"Keep-Alive":        true,
	"Te":                true,
	"Trailer":           true,
	"Transfer-Encoding": true,
	"Upgrade":           true,
	"Host":              true,
	"Content-Length":    true,
	"Proxy-Connection":  true,
	// A CGI server's HTTP_PROXY, which many HTTP clients take for the
	// proxy to use (httpoxy).
	"Proxy":               true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	// Headers that tell the origin (or a proxy before it) which client or
	// host the request came through: an origin that trusts them would take
	// the guest for an internal caller.
	"Forwarded":           true,
	"X-Real-Ip":           true,
	"X-Client-Ip":         true,
	"True-Client-Ip":      true,
	"X-Originating-Ip":    true,
	"X-Cluster-Client-Ip": true,
	"Cf-Connecting-Ip":    true,
	"Via":                 true,
}

// Caps on the headers a guest may ask for, in count and in bytes of names
// and values: beyond them the call is too_large.
const (
	MaxGuestHeaders     = 64
	MaxGuestHeaderBytes = 16 << 10
)

// headersCapError is request.send's headers past a cap (MaxGuestHeaders
// or MaxGuestHeaderBytes), found as they are decoded.
type headersCapError struct{ msg string }

func (e *headersCapError) Error() string { return e.msg }

// guestHeaderMap is request.send's headers as the guest gave them, decoded
// only as far as the caps: the map was decoded whole before its count was
// checked, in the session's read loop, and a frame of a headers object of
// a few hundred thousand names cost the daemon an allocation or two a
// name for a call refused at the 65th.
type guestHeaderMap map[string]string

// UnmarshalJSONFrom decodes an object of string values up to the caps,
// and leaves any other JSON (null, or not an object) to the decoding a
// map of strings has, so its errors read as any other field's.
func (m *guestHeaderMap) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() != '{' {
		return errors.ErrUnsupported
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	out := guestHeaderMap{}
	size := 0
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return err
		}
		k := name.String() // before the decoder reads on
		if len(out) == MaxGuestHeaders {
			return &headersCapError{fmt.Sprintf("more than %d headers: at most %d", MaxGuestHeaders, MaxGuestHeaders)}
		}
		var v string
		if err := json.UnmarshalDecode(dec, &v); err != nil {
			return err
		}
		if size += len(k) + len(v); size > MaxGuestHeaderBytes {
			return &headersCapError{fmt.Sprintf("more than %d bytes of names and values: at most %d", MaxGuestHeaderBytes, MaxGuestHeaderBytes)}
		}
		out[k] = v
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	*m = out
	return nil
}

// secretHopDropped are the guest's headers left out of a request that
// carries a secret: each could make an origin that echoes the secret send
// it back in a form the scrubber cannot see (byte ranges, or a body the
// transport leaves compressed because the guest asked for the encoding).
var secretHopDropped = []string{"Range", "If-Range", "Accept-Encoding"}

// credentialHeaders may not come from the guest on an origin where the
// broker injects a secret, so a guest cannot mix its own credentials with
// (or probe the shape of) the operator's.
var credentialHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization"}

// dropHeader reports whether the guest's header named name (cgiName) is
// never forwarded.
func dropHeader(name string) bool {
	return droppedHeaders[name] || strings.HasPrefix(name, "Proxy-") || strings.HasPrefix(name, "X-Forwarded-")
}

// cgiName is the header k as a CGI-style server (Go's net/http/cgi, a
// FastCGI front end, older WSGI servers) names it, which reads '_' as
// '-': X_Real_IP is X-Real-IP to it, and every rule about a header holds
// for both spellings.
func cgiName(k string) string {
	return http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))
}

// delHeaders deletes from h every header whose cgiName is one of names.
func delHeaders(h http.Header, names []string) {
	for k := range h {
		if slices.Contains(names, cgiName(k)) {
			delete(h, k)
		}
	}
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || !isTokenChar(c) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validHeaderValue: no control characters but horizontal tab, so no CR/LF
// header injection and no NUL.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// responseHeaders flattens the server's headers into lower-case names with
// repeated values joined by ", " (as fetch's Headers does).
func responseHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		out[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return out
}
