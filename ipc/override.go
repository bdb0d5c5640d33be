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
	"strings"
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
// Symfony read it from JSON input too), as each Content-Type the request
// gives (a server may read any of them) makes a server read the body.
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

// typedOverrides is formOverrides for a body of Content-Type ct. A body
// without a type is a URL-encoded form to Rack (a POST's); a type that
// holds "json" anywhere is JSON to Laravel (which looks for "/json" and
// "+json" in the header). A multipart body is refused unless it parses to
// its end: a server that skips a part it cannot read would read the parts
// after it, which the check would not have seen.
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
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("a multipart form that does not parse: %w", err)
			}
			if isOverrideName(part.FormName()) {
				v, _ := io.ReadAll(io.LimitReader(part, 64))
				out = append(out, string(v))
			}
		}
	case strings.Contains(strings.ToLower(ct), "json"):
		var members map[string]json.RawMessage
		_ = json.Unmarshal([]byte(body), &members)
		for k, raw := range members {
			var v string
			if strings.EqualFold(k, overrideParam) && json.Unmarshal(raw, &v) == nil {
				out = append(out, v)
			}
		}
	}
	return out, nil
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
		if isOverrideName(unescape(name)) {
			out = append(out, unescape(value))
		}
	}
	return out
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
// '_'.
func isOverrideName(name string) bool {
	name = strings.TrimLeft(name, " ")
	if len(name) != len(overrideParam) {
		return false
	}
	return strings.EqualFold(strings.Map(func(r rune) rune {
		if r == ' ' || r == '.' || r == '[' {
			return '_'
		}
		return r
	}, name), overrideParam)
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
