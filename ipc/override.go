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
	// CGI-style servers read X_HTTP_METHOD_OVERRIDE as the same variable
	// as the hyphenated name: compare names with '_' taken as '-'.
	for k, vs := range h.header {
		if !slices.Contains(overrideHeaders, cgiName(k)) {
			continue
		}
		for _, v := range vs {
			if cerr := b.checkOverrideValue(k, v); cerr != nil {
				return cerr
			}
		}
	}
	for _, v := range fieldValues(h.url.RawQuery) {
		if cerr := b.checkOverrideValue("the query's "+overrideParam, v); cerr != nil {
			return cerr
		}
	}
	if h.body != nil {
		forms := checkForms(h)
		if forms.err != nil {
			return callErr(CodeDenied, "body: %v: the broker cannot check it for a %s field", forms.err, overrideParam)
		}
		for _, v := range forms.values {
			if cerr := b.checkOverrideValue("the form's "+overrideParam, v); cerr != nil {
				return cerr
			}
		}
	}
	return nil
}

// formOverrides returns the _method fields of a URL-encoded or multipart
// form body, or the top-level _method member of a JSON one (Laravel and
// Symfony read it from JSON input too), as the request's Content-Type
// makes a server read the body. guestHeaders lets a call give one; each
// further one here would be a whole parse more.
func formOverrides(h http.Header, body string) ([]string, error) {
	types := h.Values("Content-Type")
	if len(types) == 0 {
		types = []string{""}
	}
	var out []string
	for _, ct := range types {
		vs, err := typedOverrides(ct, body)
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	return out, nil
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

// typedOverrides is formOverrides for a body of Content-Type ct. A body
// without a type is a URL-encoded form to Rack (a POST's); a type that
// holds "json" anywhere is JSON to Laravel (which looks for "/json" and
// "+json" in the header). A multipart body is refused unless it parses to
// its end, within maxFormParts and maxFormHeaders: a server that skips a
// part it cannot read would read the parts after it, which the check
// would not have seen.
func typedOverrides(ct, body string) ([]string, error) {
	mt, params, typeErr := mediaType(ct)
	var out []string
	switch {
	case mt == "", mt == "application/x-www-form-urlencoded":
		out = fieldValues(body)
	case mt == "multipart/form-data":
		if typeErr != nil || params["boundary"] == "" {
			return nil, fmt.Errorf("a multipart form whose Content-Type %.80q does not parse or names no boundary", ct)
		}
		mr := multipart.NewReader(strings.NewReader(body), params["boundary"])
		parts, lines := 0, 0
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("a multipart form that does not parse: %w", err)
			}
			parts++
			for _, vs := range part.Header {
				lines += len(vs)
			}
			if parts > maxFormParts {
				return nil, fmt.Errorf("a multipart form of more than %d parts", maxFormParts)
			}
			if lines > maxFormHeaders {
				return nil, fmt.Errorf("a multipart form of more than %d header lines", maxFormHeaders)
			}
			if isOverrideName(part.FormName()) {
				v, _ := io.ReadAll(io.LimitReader(part, 64))
				out = append(out, string(v))
			}
		}
	case strings.Contains(strings.ToLower(ct), "json"):
		out = jsonOverrides(body)
	}
	return out, nil
}

// jsonOverrides returns the string values of the top-level members of the
// JSON object body named _method in any case, every one of them (a key
// given twice included: parsers differ in which they keep); none when
// body is not a JSON object. It walks the text and decodes only those
// members: decoding every member into a map cost ~80 ms and 20 bytes of
// heap a byte of body (a 3 MiB body of short members, 65 MiB), in the
// session's read loop.
func jsonOverrides(body string) []string {
	if !json.Valid([]byte(body)) {
		return nil
	}
	var out []string
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil
	}
	i++
	for {
		i = skipSpace(body, i)
		if i >= len(body) || body[i] == '}' {
			return out
		}
		// body is valid JSON: a member is a string, ':', a value.
		end := stringEnd(body, i)
		key := body[i:end]
		i = skipSpace(body, end)
		i = skipSpace(body, i+1) // past ':'
		vend := valueEnd(body, i)
		// "_method" escaped as far as it goes is 7 escapes of 6 bytes.
		if len(key) <= 2+7*6 && isOverrideKey(key) {
			if v, ok := jsonString(body[i:vend]); ok {
				out = append(out, v)
			}
		}
		i = skipSpace(body, vend)
		if i < len(body) && body[i] == ',' {
			i++
		}
	}
}

// jsonString is the string the JSON value raw holds, if it is one: a
// plain one (no escape, valid UTF-8) is raw's own text, without the heap.
func jsonString(raw string) (string, bool) {
	if len(raw) >= 2 && raw[0] == '"' && !strings.Contains(raw, `\`) && utf8.ValidString(raw) {
		return raw[1 : len(raw)-1], true
	}
	var v string
	return v, json.Unmarshal([]byte(raw), &v) == nil
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

// fieldValues returns the values of every field named _method, as a
// server may name it (isOverrideName), in a query string or URL-encoded
// form. It splits at every '&' and ';' itself, without a cap on the
// fields (url.ParseQuery gives up on a form of 10,000 fields or more,
// and drops a field holding a ';', both of which servers read), and an
// escape that does not decode is read as it stands.
func fieldValues(raw string) []string {
	var out []string
	for raw != "" {
		var field string
		if i := strings.IndexAny(raw, "&;"); i >= 0 {
			field, raw = raw[:i], raw[i+1:]
		} else {
			field, raw = raw, ""
		}
		name, value, _ := strings.Cut(field, "=")
		if isOverrideField(name) {
			out = append(out, unescape(value))
		}
	}
	return out
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

// checkOverrideValue: the method an override names must be one the job
// declared and the operator allows.
func (b *broker) checkOverrideValue(where, v string) *CallError {
	m := strings.ToUpper(strings.TrimSpace(v))
	if slices.Contains(b.req.methods(), m) && (b.ceil.Methods == nil || slices.Contains(b.ceil.Methods, m)) {
		return nil
	}
	return callErr(CodeDenied, "%s overrides the method with %.40q, which is not declared in capabilities.request.methods", where, v)
}
