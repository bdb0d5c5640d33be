package ipc

import (
	"encoding/json"
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
		if !slices.Contains(overrideHeaders, http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))) {
			continue
		}
		for _, v := range vs {
			if cerr := b.checkOverrideValue(k, v); cerr != nil {
				return cerr
			}
		}
	}
	for _, vs := range foldedParams(h.url.Query()) {
		for _, v := range vs {
			if cerr := b.checkOverrideValue("the query's "+overrideParam, v); cerr != nil {
				return cerr
			}
		}
	}
	if h.body != nil {
		for _, v := range formOverrides(h.header, *h.body) {
			if cerr := b.checkOverrideValue("the form's "+overrideParam, v); cerr != nil {
				return cerr
			}
		}
	}
	return nil
}

// formOverrides returns the _method fields of a URL-encoded or multipart
// form body, or the top-level _method member of a JSON one (Laravel and
// Symfony read it from JSON input too); what parses is what a server
// would read, so a malformed rest is ignored.
func formOverrides(h http.Header, body string) []string {
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return nil
	}
	var out []string
	switch mt {
	case "application/x-www-form-urlencoded":
		form, _ := url.ParseQuery(body)
		for _, vs := range foldedParams(form) {
			out = append(out, vs...)
		}
	case "application/json":
		var members map[string]json.RawMessage
		_ = json.Unmarshal([]byte(body), &members)
		for k, raw := range members {
			var v string
			if strings.EqualFold(k, overrideParam) && json.Unmarshal(raw, &v) == nil {
				out = append(out, v)
			}
		}
	case "multipart/form-data":
		mr := multipart.NewReader(strings.NewReader(body), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			if strings.EqualFold(part.FormName(), overrideParam) {
				v, _ := io.ReadAll(io.LimitReader(part, 64))
				out = append(out, string(v))
			}
		}
	}
	return out
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

// foldedParams returns the values of every parameter named _method in any
// case (servers differ in how they match it).
func foldedParams(q url.Values) [][]string {
	var out [][]string
	for k, vs := range q {
		if strings.EqualFold(k, overrideParam) {
			out = append(out, vs)
		}
	}
	return out
}
