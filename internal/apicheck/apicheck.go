// Package apicheck holds what crosses pmjail's socket to the API's OpenAPI
// document (package api): the bodies a request sends and a response
// returns, by path, method, status and media type. Tests use it, through
// a checking http.RoundTripper, so that the document is the contract the
// daemon is seen to keep, not prose beside it.
package apicheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pmjail/pmjail/api"
)

// docURL names the document inside the compiler; nothing is fetched.
const docURL = "https://pmjail.invalid/api/openapi.json"

// NDJSON is the media type of a streamed run: one JSON value a line.
const NDJSON = "application/x-ndjson"

// ErrUndocumented marks an exchange the document does not describe: a
// path, method, status or media type it does not name.
var ErrUndocumented = errors.New("not in the OpenAPI document")

// Doc is the OpenAPI document with its schemas compiled on first use. It
// is safe for concurrent use.
type Doc struct {
	// Raw is the document as decoded JSON (objects are map[string]any).
	Raw map[string]any

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

// Load reads the document the api package embeds.
func Load() (*Doc, error) {
	return Parse(api.OpenAPI)
}

// Parse reads an OpenAPI document.
func Parse(data []byte) (*Doc, error) {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decode OpenAPI document: %w", err)
	}
	raw, ok := inst.(map[string]any)
	if !ok {
		return nil, errors.New("decode OpenAPI document: not a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, inst); err != nil {
		return nil, fmt.Errorf("load OpenAPI document: %w", err)
	}
	return &Doc{Raw: raw, compiler: c, schemas: map[string]*jsonschema.Schema{}}, nil
}

// Schema compiles the schema at a JSON pointer of the document
// ("#/components/schemas/Job").
func (d *Doc) Schema(ptr string) (*jsonschema.Schema, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.schemas[ptr]; ok {
		return s, nil
	}
	s, err := d.compiler.Compile(docURL + ptr)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", ptr, err)
	}
	d.schemas[ptr] = s
	return s, nil
}

// Lookup returns the value at a JSON pointer of the document, following
// a "$ref" the value holds (a response or a parameter by reference), and
// the pointer it was found at.
func (d *Doc) Lookup(ptr string) (any, string, error) {
	for range 8 {
		v, err := d.At(ptr)
		if err != nil {
			return nil, "", err
		}
		m, ok := v.(map[string]any)
		if !ok {
			return v, ptr, nil
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return v, ptr, nil
		}
		if !strings.HasPrefix(ref, "#/") {
			return nil, "", fmt.Errorf("%s: $ref %q outside the document", ptr, ref)
		}
		ptr = ref
	}
	return nil, "", fmt.Errorf("%s: $ref chain too long", ptr)
}

// At returns the value at a JSON pointer of the document as it is
// written, a "$ref" not followed.
func (d *Doc) At(ptr string) (any, error) {
	var v any = d.Raw
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "#/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, fmt.Errorf("%s: no %q", ptr, tok)
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("%s: no item %q", ptr, tok)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("%s: %q is not inside an object or array", ptr, tok)
		}
	}
	return v, nil
}

// Pointer joins JSON-pointer tokens, escaping each.
func Pointer(base string, toks ...string) string {
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	for _, t := range toks {
		base += "/" + esc.Replace(t)
	}
	return base
}

// mediaType is a Content-Type without its parameters.
func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return strings.TrimSpace(strings.ToLower(ct))
	}
	return mt
}

// isJSON reports whether a media type's bodies are JSON (one value, or a
// value a line).
func isJSON(mt string) bool {
	return mt == "application/json" || mt == NDJSON || strings.HasSuffix(mt, "+json")
}

// operation is the pointer of a method on a path, or ErrUndocumented.
func (d *Doc) operation(method, path string) (string, error) {
	path = d.pathKey(path)
	op := Pointer("#", "paths", path, strings.ToLower(method))
	if _, _, err := d.Lookup(Pointer("#", "paths", path)); err != nil {
		return "", fmt.Errorf("%w: path %s", ErrUndocumented, path)
	}
	if _, _, err := d.Lookup(op); err != nil {
		return "", fmt.Errorf("%w: %s %s", ErrUndocumented, method, path)
	}
	return op, nil
}

// bodySchema is the pointer of the schema for a media type under a
// request body or a response object, or ErrUndocumented.
func (d *Doc) bodySchema(at, what, contentType string) (ptr, mt string, err error) {
	mt = mediaType(contentType)
	_, obj, err := d.Lookup(at)
	if err != nil {
		return "", mt, err
	}
	ptr = Pointer(obj, "content", mt, "schema")
	if _, _, err := d.Lookup(ptr); err != nil {
		return "", mt, fmt.Errorf("%w: %s as %q", ErrUndocumented, what, mt)
	}
	return ptr, mt, nil
}

// Request checks a request's body against the operation's request body.
// A path or method the document does not name is ErrUndocumented (the
// daemon answers it 404 or 405, which Response checks).
func (d *Doc) Request(method, path, contentType string, body []byte) error {
	op, err := d.operation(method, path)
	if err != nil {
		return err
	}
	if _, _, err := d.Lookup(Pointer(op, "requestBody")); err != nil {
		if len(body) > 0 {
			return fmt.Errorf("%w: a body for %s %s", ErrUndocumented, method, path)
		}
		return nil
	}
	ptr, mt, err := d.bodySchema(Pointer(op, "requestBody"), method+" "+path+" request", contentType)
	if err != nil {
		return err
	}
	return d.validate(ptr, mt, body)
}

// Response checks a response's status, media type and body. A path or
// method the document does not name must have been answered 404 or 405
// with an error body.
func (d *Doc) Response(method, path string, status int, contentType string, body []byte) error {
	at, err := d.response(method, path, status)
	if err != nil {
		return err
	}
	ptr, mt, err := d.bodySchema(at, fmt.Sprintf("%s %s %d", method, path, status), contentType)
	if err != nil {
		return err
	}
	return d.validate(ptr, mt, body)
}

// response is the pointer of the response object for a status.
func (d *Doc) response(method, path string, status int) (string, error) {
	op, err := d.operation(method, path)
	switch {
	case errors.Is(err, ErrUndocumented) && status == http.StatusNotFound && !d.hasPath(path):
		return "#/components/responses/NotFound", nil
	case errors.Is(err, ErrUndocumented) && status == http.StatusMethodNotAllowed && d.hasPath(path):
		return "#/components/responses/MethodNotAllowed", nil
	case err != nil:
		return "", fmt.Errorf("%w (answered %d)", err, status)
	}
	for _, code := range []string{strconv.Itoa(status), strconv.Itoa(status/100) + "XX", "default"} {
		ptr := Pointer(op, "responses", code)
		if _, _, err := d.Lookup(ptr); err == nil {
			return ptr, nil
		}
	}
	return "", fmt.Errorf("%w: status %d of %s %s", ErrUndocumented, status, method, path)
}

func (d *Doc) hasPath(path string) bool {
	_, _, err := d.Lookup(Pointer("#", "paths", d.pathKey(path)))
	return err == nil
}

// pathKey is the document's key for a request's path: the path itself,
// or a template whose {parameter} segments match it (/v1/runs/{id}).
func (d *Doc) pathKey(path string) string {
	paths, _, err := d.Lookup("#/paths")
	m, _ := paths.(map[string]any)
	if err != nil || m[path] != nil {
		return path
	}
	segs := strings.Split(path, "/")
	for key := range m {
		tsegs := strings.Split(key, "/")
		if len(tsegs) != len(segs) || !strings.Contains(key, "{") {
			continue
		}
		match := true
		for i, t := range tsegs {
			param := strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}")
			if (param && segs[i] == "") || (!param && t != segs[i]) {
				match = false
				break
			}
		}
		if match {
			return key
		}
	}
	return path
}

// validate checks a body of media type mt: one JSON value, one a line
// (NDJSON), or, for a type that is not JSON, nothing beyond the type.
func (d *Doc) validate(ptr, mt string, body []byte) error {
	if !isJSON(mt) {
		return nil
	}
	if mt == NDJSON {
		lines := bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n"))
		for i, line := range lines {
			if err := d.Value(ptr, line); err != nil {
				return fmt.Errorf("line %d: %w", i+1, err)
			}
		}
		return nil
	}
	return d.Value(ptr, body)
}

// Value checks one JSON value against the schema at ptr.
func (d *Doc) Value(ptr string, data []byte) error {
	s, err := d.Schema(ptr)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not one JSON value (%w): %.200q", err, data)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("against %s: %w", ptr, err)
	}
	return nil
}

// Compact is a body shortened for a message.
func Compact(body []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, body) != nil {
		b.Reset()
		b.Write(body)
	}
	if b.Len() > 300 {
		return b.String()[:300] + "…"
	}
	return b.String()
}
