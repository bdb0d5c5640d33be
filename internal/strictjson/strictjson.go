// Package strictjson decodes one JSON value the strict way pmjail reads
// every input it is handed (a job, a config, a profile, a guest's call):
// no unknown keys, nothing after the value. Its errors say what is wrong
// in the input's own terms: the path to the value at fault
// ("limits.memory", "capabilities.request.urls[0]", `secrets["k"].header`)
// and the JSON wanted there, never a Go type's name.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Error is a problem at one place in the input: a value Decode refused,
// or one a check refused after decoding (Errorf). Callers find the field
// at fault with errors.As, however the error was wrapped since.
type Error struct {
	// Field is the path to the value at fault, its fields named as the
	// decoded type names them; empty for the value as a whole or where no
	// place is known (a syntax error).
	Field string
	Err   error
}

// Errorf returns a problem at field, its message formatted as by
// fmt.Errorf (%w wraps).
func Errorf(field, format string, args ...any) error {
	return &Error{Field: field, Err: fmt.Errorf(format, args...)}
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return e.Field + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Located reports whether err is an Error at a named field: the input was
// well-formed JSON with one value at fault, not malformed as a whole.
func Located(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Field != ""
}

// Headed returns err as it is when it names its field, and otherwise under
// head ("malformed job JSON: ..."): only input that is not one well-formed
// value is called malformed, where a value at fault is named by its field.
func Headed(err error, head string) error {
	if Located(err) {
		return err
	}
	return fmt.Errorf("%s: %w", head, err)
}

// Decode decodes data, which must hold exactly one JSON value, into v, a
// non-nil pointer. A key that names no field of the type it decodes into
// is refused, in every object nested in data too.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describe(err, data, reflect.TypeOf(v))
	}
	if _, err := dec.Token(); err != io.EOF {
		return &Error{Err: errors.New("data after the JSON value")}
	}
	return nil
}

// describe turns a decoding error into an Error. encoding/json names the
// place only of a value of the wrong JSON type, and then without array
// indices or map keys; the input is walked again to name it in full, and
// to find at all an unknown key or a value its type's own UnmarshalJSON
// refused.
func describe(err error, data []byte, t reflect.Type) error {
	if _, ok := errors.AsType[*json.InvalidUnmarshalError](err); ok {
		return err // the caller's mistake, not the input's
	}
	if syntax, ok := errors.AsType[*json.SyntaxError](err); ok {
		return &Error{Err: fmt.Errorf("%v (at byte %d)", syntax, syntax.Offset)}
	}
	switch {
	case errors.Is(err, io.EOF):
		return &Error{Err: errors.New("no JSON value")}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Err: errors.New("unexpected end of the JSON")}
	}
	if typ, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		field := typ.Field
		if at := valueAt(data, t, typ.Offset); at != nil {
			field = at.String()
		}
		return &Error{Field: field, Err: fmt.Errorf("want %s, got JSON %s", kind(typ.Type), typ.Value)}
	}
	if e := firstRefused(data, t); e != nil {
		return e
	}
	return &Error{Err: errors.New(strings.TrimPrefix(err.Error(), "json: "))}
}

// kind names the JSON a Go type decodes from, for a reader who never saw
// the Go type.
func kind(t reflect.Type) string {
	if p := reflect.PointerTo(t); p.Implements(textUnmarshaler) && !p.Implements(jsonUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return kind(t.Elem())
	}
	return "another JSON value"
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// firstRefused returns the first unknown key in data, in the input's
// order, or the first value whose type's own UnmarshalJSON or
// UnmarshalText refuses it; nil if there is neither.
func firstRefused(data []byte, t reflect.Type) *Error {
	var found *Error
	w := walker{visit: func(n node) bool {
		if found != nil {
			return false
		}
		switch {
		case n.typ == nil:
			found = &Error{Field: n.path.String(), Err: errors.New("unknown field")}
		case reflect.PointerTo(n.typ).Implements(jsonUnmarshaler):
			u := reflect.New(n.typ).Interface().(json.Unmarshaler)
			if err := u.UnmarshalJSON(n.data); err != nil {
				found = &Error{Field: n.path.String(), Err: err}
			}
		case reflect.PointerTo(n.typ).Implements(textUnmarshaler):
			var s string
			if json.Unmarshal(n.data, &s) != nil {
				return false // not a string: a type error, not this one
			}
			u := reflect.New(n.typ).Interface().(encoding.TextUnmarshaler)
			if err := u.UnmarshalText([]byte(s)); err != nil {
				found = &Error{Field: n.path.String(), Err: err}
			}
		default:
			return true
		}
		return false
	}}
	w.walk(data, 0, t, nil)
	return found
}

// valueAt returns the path to the innermost value of data that holds the
// byte offset an UnmarshalTypeError gives (the end of a literal, or inside
// an array or object); nil if none does.
func valueAt(data []byte, t reflect.Type, offset int64) *step {
	var at *step
	w := walker{visit: func(n node) bool {
		if n.start >= offset || n.start+int64(len(n.data)) < offset {
			return false
		}
		at = n.path
		return n.typ != nil
	}}
	w.walk(data, 0, t, nil)
	return at
}

// A node is one value the walk meets.
type node struct {
	data  []byte
	start int64        // data's offset in the input
	typ   reflect.Type // what it decodes into; nil under an unknown key
	path  *step
}

// walker goes through a JSON value as encoding/json decodes it into a Go
// type, calling visit with each value in the input's order and going into
// those for which visit returns true.
type walker struct {
	visit  func(node) bool
	fields map[reflect.Type]fieldSet
}

func (w *walker) walk(data []byte, start int64, t reflect.Type, path *step) {
	lead := len(data) - len(bytes.TrimLeft(data, " \t\r\n"))
	data, start = data[lead:], start+int64(lead)
	for t != nil && t.Kind() == reflect.Pointer {
		if bytes.HasPrefix(data, []byte("null")) {
			return // the decoder leaves a nil pointer, asking no one
		}
		t = t.Elem()
	}
	if !w.visit(node{data: data, start: start, typ: t, path: path}) || t == nil {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := w.fieldsOf(t)
		members(data, start, func(key string, value []byte, at int64) {
			if f, ok := fields.find(key); ok {
				w.walk(value, at, f.typ, &step{up: path, name: f.name})
			} else {
				w.walk(value, at, nil, &step{up: path, name: key, quoted: !plainName(key)})
			}
		})
	case reflect.Map:
		members(data, start, func(key string, value []byte, at int64) {
			w.walk(value, at, t.Elem(), &step{up: path, name: key, quoted: true})
		})
	case reflect.Slice, reflect.Array:
		elements(data, start, func(i int, value []byte, at int64) {
			if t.Kind() == reflect.Slice || i < t.Len() {
				w.walk(value, at, t.Elem(), &step{up: path, index: i, element: true})
			}
		})
	}
}

// members calls fn with each key and value of the object data holds, in
// order, and the value's offset in the input. Data that is not an object
// has none.
func members(data []byte, start int64, fn func(key string, value []byte, at int64)) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return
	}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		var value json.RawMessage
		if err != nil || !ok || dec.Decode(&value) != nil {
			return
		}
		fn(key, value, start+dec.InputOffset()-int64(len(value)))
	}
}

// elements is members for an array.
func elements(data []byte, start int64, fn func(i int, value []byte, at int64)) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return
	}
	for i := 0; dec.More(); i++ {
		var value json.RawMessage
		if dec.Decode(&value) != nil {
			return
		}
		fn(i, value, start+dec.InputOffset()-int64(len(value)))
	}
}

// A step is one level of a path, kept as a list up to the root so that a
// walk builds no path it does not report.
type step struct {
	up      *step
	name    string
	quoted  bool // a map key, or a key that is no plain name: ["..."]
	index   int
	element bool // an array element: [index]
}

func (s *step) String() string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	s.write(&b)
	return b.String()
}

func (s *step) write(b *strings.Builder) {
	if s.up != nil {
		s.up.write(b)
	}
	switch {
	case s.element:
		fmt.Fprintf(b, "[%d]", s.index)
	case s.quoted:
		fmt.Fprintf(b, "[%q]", s.name)
	default:
		if s.up != nil {
			b.WriteByte('.')
		}
		b.WriteString(s.name)
	}
}

// plainName reports whether a key reads unambiguously after a dot.
func plainName(key string) bool {
	if key == "" {
		return false
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

type field struct {
	name  string
	typ   reflect.Type
	depth int
}

type fieldSet []field

func (w *walker) fieldsOf(t reflect.Type) fieldSet {
	if set, ok := w.fields[t]; ok {
		return set
	}
	if w.fields == nil {
		w.fields = map[reflect.Type]fieldSet{}
	}
	set := collectFields(t, 0, map[reflect.Type]bool{})
	w.fields[t] = set
	return set
}

// collectFields lists the fields encoding/json decodes an object into t
// by: exported fields under their tag's name, and the fields of embedded
// structs without a name as if they were t's own, deeper than t's own
// (find prefers the shallower). A field with the ",string" option holds a
// quoted scalar, which has no place inside, so it is left out of the walk
// by being typed as a string.
func collectFields(t reflect.Type, depth int, visited map[reflect.Type]bool) fieldSet {
	if visited[t] {
		return nil
	}
	visited[t] = true
	var set fieldSet
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			set = append(set, collectFields(ft, depth+1, visited)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		typ := f.Type
		if opts == "string" || strings.HasPrefix(opts, "string,") || strings.Contains(opts, ",string") {
			typ = reflect.TypeFor[string]()
		}
		set = append(set, field{name: name, typ: typ, depth: depth})
	}
	return set
}

// find matches a key as encoding/json does: the shallowest field of that
// name exactly, or else ignoring case.
func (s fieldSet) find(key string) (field, bool) {
	for _, equal := range []func(a, b string) bool{
		func(a, b string) bool { return a == b },
		strings.EqualFold,
	} {
		best := -1
		for i, f := range s {
			if equal(f.name, key) && (best < 0 || f.depth < s[best].depth) {
				best = i
			}
		}
		if best >= 0 {
			return s[best], true
		}
	}
	return field{}, false
}
