package ipc

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// overrideHeaders name a method that many frameworks (Rails, Laravel,
// Express's method-override, ASP.NET, Google's APIs) honour in place of the
// request's own: a GET carrying one may act as a DELETE.
var overrideHeaders = []string{"X-Http-Method-Override", "X-Method-Override", "X-Http-Method"}

// overrideParam is the query or form field with the same effect.
const overrideParam = "_method"

// checkOverride denies a hop whose method override names a method the job
// may not use, so that the method check holds for the method the origin
// will act on, not only the one on the wire.
func (b *broker) checkOverride(h hop) *CallError {
	allowed := b.overrideMethods()
	// CGI-style servers read X_HTTP_METHOD_OVERRIDE as the same variable
	// as the hyphenated name: compare names with '_' taken as '-'.
	for k, vs := range h.header {
		if !slices.Contains(overrideHeaders, cgiName(k)) {
			continue
		}
		for _, v := range vs {
			if !methodAllowed(allowed, v) {
				return overrideDenied(k, v)
			}
		}
	}
	if v, ok := deniedField(h.url.RawQuery, allowed); ok {
		return overrideDenied("the query's "+overrideParam, v)
	}
	if h.body != nil {
		forms := checkForms(h, allowed)
		if forms.err != nil {
			return callErr(CodeDenied, "body: %v: the broker cannot check it for a %s field", forms.err, overrideParam)
		}
		if forms.denied != nil {
			return overrideDenied("the form's "+overrideParam, *forms.denied)
		}
	}
	return nil
}

// overrideMethods are the methods an override may name: those the job
// declared that the operator allows.
func (b *broker) overrideMethods() []string {
	var out []string
	for _, m := range b.req.methods() {
		if b.ceil.Methods == nil || slices.Contains(b.ceil.Methods, m) {
			out = append(out, m)
		}
	}
	return out
}

func overrideDenied(where, v string) *CallError {
	return callErr(CodeDenied, "%s overrides the method with %.40q, which is not declared in capabilities.request.methods", where, v)
}

// deniedOverride returns the first _method field of a URL-encoded or
// multipart form body, or top-level _method member of a JSON one (Laravel
// and Symfony read it from JSON input too), that names a method not in
// allowed, as the request's Content-Type makes a server read the body.
// guestHeaders lets a call give one; each further one here would be a
// whole parse more. Each value is checked as it is found and none is kept:
// a body of many allowed ones, kept in a list to the end, cost the daemon
// tens of MiB a frame, in the session's read loop.
func deniedOverride(h http.Header, body string, allowed []string) (string, bool, error) {
	types := h.Values("Content-Type")
	if len(types) == 0 {
		types = []string{""}
	}
	for _, ct := range types {
		v, denied, err := typedOverride(ct, body, allowed)
		if err != nil || denied {
			return v, denied, err
		}
	}
	return "", false, nil
}

// The most parts, and header lines in all its parts, of a multipart body
// the broker reads for _method fields: Go's ReadForm's defaults, so a Go
// origin refuses a larger form itself. The broker reads a form in the
// session's read loop, on CPU time no run counts, and each part and line
// costs it allocations: a frame of tiny parts cost several times what
// reading a plain frame of its size does.
const (
	maxFormParts   = 1000
	maxFormHeaders = 10000
)

// typedOverride is deniedOverride for a body of Content-Type ct. A body
// without a type is a URL-encoded form to Rack (a POST's); a type that
// holds "json" anywhere is JSON to Laravel (which looks for "/json" and
// "+json" in the header). A multipart body is refused unless it parses to
// its end, within maxFormParts and maxFormHeaders: a server that skips a
// part it cannot read would read the parts after it, which the check
// would not have seen.
func typedOverride(ct, body string, allowed []string) (string, bool, error) {
	mt, params, typeErr := mediaType(ct)
	switch {
	case mt == "", mt == "application/x-www-form-urlencoded":
		v, denied := deniedField(body, allowed)
		return v, denied, nil
	case mt == "multipart/form-data":
		if typeErr != nil || params["boundary"] == "" {
			return "", false, fmt.Errorf("a multipart form whose Content-Type %.80q does not parse or names no boundary", ct)
		}
		mr := multipart.NewReader(strings.NewReader(body), params["boundary"])
		parts, lines := 0, 0
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				return "", false, nil
			}
			if err != nil {
				return "", false, fmt.Errorf("a multipart form that does not parse: %w", err)
			}
			parts++
			for _, vs := range part.Header {
				lines += len(vs)
			}
			if parts > maxFormParts {
				return "", false, fmt.Errorf("a multipart form of more than %d parts", maxFormParts)
			}
			if lines > maxFormHeaders {
				return "", false, fmt.Errorf("a multipart form of more than %d header lines", maxFormHeaders)
			}
			if isOverrideName(part.FormName()) {
				v, _ := io.ReadAll(io.LimitReader(part, 64))
				if !methodAllowed(allowed, string(v)) {
					return string(v), true, nil
				}
			}
		}
	case strings.Contains(strings.ToLower(ct), "json"):
		v, denied := deniedJSON(body, allowed)
		return v, denied, nil
	}
	return "", false, nil
}

// deniedJSON returns the first string value of a top-level member of the
// JSON object body named _method in any case (a key given twice included:
// parsers differ in which they keep) that names a method not in allowed;
// none when body is not a JSON object. It walks the text and decodes only
// those members, and their values without the heap (jsonMethod):
// decoding every member into a map cost ~80 ms and 20 bytes of heap a
// byte of body (a 3 MiB body of short members, 65 MiB), and each escaped
// value decoded on the heap ~3 allocations, in the session's read loop.
func deniedJSON(body string, allowed []string) (string, bool) {
	if !json.Valid([]byte(body)) {
		return "", false
	}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return "", false
	}
	i++
	for {
		i = skipSpace(body, i)
		if i >= len(body) || body[i] == '}' {
			return "", false
		}
		// body is valid JSON: a member is a string, ':', a value.
		end := stringEnd(body, i)
		key := body[i:end]
		i = skipSpace(body, end)
		i = skipSpace(body, i+1) // past ':'
		vend := valueEnd(body, i)
		// "_method" escaped as far as it goes is 7 escapes of 6 bytes.
		if len(key) <= 2+7*6 && isOverrideKey(key) {
			raw := body[i:vend]
			if m, ok := jsonMethod(raw); ok && !m.in(allowed) {
				v, _ := jsonString(raw)
				return v, true
			}
		}
		i = skipSpace(body, vend)
		if i < len(body) && body[i] == ',' {
			i++
		}
	}
}

// jsonString is the string the JSON value raw holds, if it is one (null
// is "" to Go): a plain one (no escape, valid UTF-8) is raw's own text,
// without the heap.
func jsonString(raw string) (string, bool) {
	if len(raw) >= 2 && raw[0] == '"' && !strings.Contains(raw, `\`) && utf8.ValidString(raw) {
		return raw[1 : len(raw)-1], true
	}
	var v string
	return v, json.Unmarshal([]byte(raw), &v) == nil
}

// jsonMethod is what methodName makes of jsonString(raw), for raw a
// valid JSON value, without the heap; false where raw is no string.
func jsonMethod(raw string) (methodName, bool) {
	var m methodName
	if raw == "null" {
		return m, true
	}
	if raw == "" || raw[0] != '"' {
		return m, false
	}
	for i := 1; i < len(raw)-1; i++ {
		c := raw[i]
		if c != '\\' {
			m.writeByte(c)
			continue
		}
		i++
		switch raw[i] {
		case 'u':
			r, _ := strconv.ParseUint(raw[i+1:i+5], 16, 16)
			i += 4
			if utf16.IsSurrogate(rune(r)) {
				// A pair is a rune past U+FFFF, a lone one U+FFFD: not
				// ASCII, and no space, either way.
				m.writeRune(utf8.RuneError)
				continue
			}
			m.writeRune(rune(r))
		case 'b':
			m.writeByte('\b')
		case 'f':
			m.writeByte('\f')
		case 'n':
			m.writeByte('\n')
		case 'r':
			m.writeByte('\r')
		case 't':
			m.writeByte('\t')
		default: // '"', '\\', '/'
			m.writeByte(raw[i])
		}
	}
	m.end()
	return m, true
}

// isOverrideKey reports whether the quoted JSON string key decodes to
// _method in any case. It decodes the key's escapes itself, without the
// heap: a body of members whose keys hold an escape cost the daemon an
// allocation or three a member, in the session's read loop. _method is
// ASCII, and no other character folds to one of its letters, so a key
// that decodes to anything else cannot match.
func isOverrideKey(key string) bool {
	var buf [len(overrideParam)]byte
	n := 0
	for i := 1; i < len(key)-1; i++ {
		c := key[i]
		if c == '\\' {
			i++
			switch key[i] {
			case 'u':
				r, err := strconv.ParseUint(key[i+1:i+5], 16, 16)
				if err != nil || r >= utf8.RuneSelf {
					return false
				}
				c, i = byte(r), i+4
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			default: // '"', '\\', '/'
				c = key[i]
			}
		}
		if n == len(buf) || c >= utf8.RuneSelf {
			return false
		}
		buf[n] = c
		n++
	}
	return n == len(buf) && asciiEqualFold(buf[:], overrideParam)
}

// asciiEqualFold reports whether b is s, ASCII letters in any case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string that starts at i
// (its opening quote) in valid JSON.
func stringEnd(s string, i int) int {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(s)
}

// valueEnd returns the index just past the JSON value that starts at i in
// valid JSON.
func valueEnd(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"':
		return stringEnd(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = stringEnd(s, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	// A number or a literal: up to the next delimiter.
	for i < len(s) && !strings.ContainsRune(",}] \t\n\r", rune(s[i])) {
		i++
	}
	return i
}

// mediaType is a Content-Type's media type and parameters. When its
// parameters do not parse, the type is still what a lenient server reads
// (up to the first ';', ',' or space), and the error says they did not.
func mediaType(ct string) (string, map[string]string, error) {
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil {
		return mt, params, nil
	}
	if i := strings.IndexAny(ct, ";, \t"); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct)), nil, err
}

// deniedField returns the first value of a field named _method, as a
// server may name it (isOverrideName), in a query string or URL-encoded
// form, that names a method not in allowed. It splits at every '&' and
// ';' itself, without a cap on the fields (url.ParseQuery gives up on a
// form of 10,000 fields or more, and drops a field holding a ';', both
// of which servers read), an escape that does not decode is read as it
// stands, and values are decoded without the heap (fieldMethod).
func deniedField(raw string, allowed []string) (string, bool) {
	for raw != "" {
		var field string
		if i := strings.IndexAny(raw, "&;"); i >= 0 {
			field, raw = raw[:i], raw[i+1:]
		} else {
			field, raw = raw, ""
		}
		name, value, _ := strings.Cut(field, "=")
		if isOverrideField(name) {
			if m := fieldMethod(value); !m.in(allowed) {
				return unescape(value), true
			}
		}
	}
	return "", false
}

// fieldMethod is what methodName makes of unescape(value), without the
// heap.
func fieldMethod(value string) methodName {
	var m methodName
	decode := strings.ContainsAny(value, "%+") && validEscapes(value)
	for i := 0; i < len(value); i++ {
		c := value[i]
		switch {
		case decode && c == '+':
			c = ' '
		case decode && c == '%':
			c, i = unhex(value[i+1])<<4|unhex(value[i+2]), i+2
		}
		m.writeByte(c)
	}
	m.end()
	return m
}

// validEscapes reports whether every '%' in s starts an escape that
// decodes, as url.QueryUnescape needs.
func validEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

// isOverrideField reports whether isOverrideName(unescape(name)) holds,
// without the heap: a form or query of fields whose names hold an escape
// or a '+' cost the daemon an allocation a field, in the session's read
// loop. A name none of whose escapes decode is read as it stands, and
// one that holds a '%' or a '+' then is not _method.
func isOverrideField(name string) bool {
	if !strings.ContainsAny(name, "%+") {
		return isOverrideName(name)
	}
	var buf [len(overrideParam)]byte
	n, lead := 0, true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch c {
		case '+':
			c = ' '
		case '%':
			if i+2 >= len(name) || !isHex(name[i+1]) || !isHex(name[i+2]) {
				return false
			}
			c, i = unhex(name[i+1])<<4|unhex(name[i+2]), i+2
		}
		if lead && c == ' ' {
			continue // isOverrideName drops leading spaces
		}
		lead = false
		if n == len(buf) {
			// Too long to match, unless an escape further on does not
			// decode: then the name stands as it is, with a '%' or '+'.
			return false
		}
		buf[n] = c
		n++
	}
	return n == len(buf) && isOverrideName(buf[:])
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// unescape is s with its escapes decoded ('+' a space), or s as it
// stands when one does not decode.
func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// isOverrideName reports whether a field named name is _method to some
// server: in any case (servers differ in how they match it), and as PHP
// names fields, its leading spaces dropped and ' ', '.' and '[' read as
// '_'. _method is ASCII and no other character folds to one of its
// letters: the bytes compare as ASCII.
func isOverrideName[S ~string | ~[]byte](name S) bool {
	i := 0
	for i < len(name) && name[i] == ' ' {
		i++
	}
	if len(name)-i != len(overrideParam) {
		return false
	}
	for j := range len(overrideParam) {
		c := name[i+j]
		switch {
		case c == ' ' || c == '.' || c == '[':
			c = '_'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != overrideParam[j] {
			return false
		}
	}
	return true
}

// methodAllowed reports whether the override value v names a method in
// allowed: in any case, around white space.
func methodAllowed(allowed []string, v string) bool {
	var m methodName
	for i := 0; i < len(v); i++ {
		m.writeByte(v[i])
	}
	m.end()
	return m.in(allowed)
}

// maxMethod is the length of the longest of AllMethods, which hold every
// method a job may declare.
const maxMethod = len("OPTIONS")

// methodName is what strings.ToUpper(strings.TrimSpace(v)) makes of an
// override's value v, written to it a byte or a rune at a time, as far as
// it can be one of AllMethods (ASCII, at most maxMethod bytes): a verdict
// without the heap, where a body of many _method values cost the daemon
// an allocation or more a value, in the session's read loop.
type methodName struct {
	buf     [maxMethod]byte
	n       int
	pending [utf8.UTFMax]byte // the bytes of a rune not yet whole
	np      int
	after   bool // white space after the name
	none    bool // v is none of AllMethods
}

// writeByte writes a byte of v.
func (m *methodName) writeByte(c byte) {
	if m.np == 0 && c < utf8.RuneSelf {
		m.writeRune(rune(c))
		return
	}
	m.pending[m.np] = c
	m.np++
	if utf8.FullRune(m.pending[:m.np]) {
		r, size := utf8.DecodeRune(m.pending[:m.np])
		if size < m.np {
			// An invalid byte, and bytes after it not read: U+FFFD
			// decides the verdict whatever they are.
			r = utf8.RuneError
		}
		m.np = 0
		m.writeRune(r)
	}
}

// writeRune writes a rune of v. strings.ToUpper writes an invalid byte
// as U+FFFD, which is neither white space nor ASCII in upper case.
func (m *methodName) writeRune(r rune) {
	switch {
	case m.none:
	case unicode.IsSpace(r):
		m.after = m.n > 0
	case m.after:
		m.none = true // white space inside
	default:
		// A few runes past ASCII are ASCII in upper case (ı, ſ).
		u := unicode.ToUpper(r)
		if u >= utf8.RuneSelf || m.n == len(m.buf) {
			m.none = true
			return
		}
		m.buf[m.n] = byte(u)
		m.n++
	}
}

// end marks the end of v: a rune left incomplete is invalid.
func (m *methodName) end() {
	if m.np > 0 {
		m.np = 0
		m.writeRune(utf8.RuneError)
	}
}

// in reports whether the method m names is in allowed.
func (m methodName) in(allowed []string) bool {
	if m.none {
		return false
	}
	for _, a := range allowed {
		if string(m.buf[:m.n]) == a {
			return true
		}
	}
	return false
}
