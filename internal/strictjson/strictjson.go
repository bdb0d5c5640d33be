// Package strictjson decodes one JSON value the strict way pmjail reads
// every input it is handed (a job, a config, a profile, a guest's call):
// no unknown keys, no key twice in one object, keys matched to fields
// exactly (not ignoring case), nothing after the value. Its errors say
// what is wrong in the input's own terms: the path to the value at fault
// ("limits.memory", "capabilities.request.urls[0]", `secrets["k"].header`)
// and the JSON wanted there, never a Go type's name.
//
// Why so strict: whoever checks a job before pmjail does (a proxy, an
// audit log) reads it with its own parser. Were a repeated key, or
// "Source" next to "source", accepted, the two could read different
// programs out of the same bytes; refused, they read the same one or
// pmjail runs none.
package strictjson

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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
	// malformed is set for input that is not well-formed JSON, whose
	// Field says where the decoder found it so: the input as a whole
	// is at fault (Located is false), its place named to help.
	malformed bool
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
	return ok && e.Field != "" && !e.malformed
}

// Headed returns err as it is when it names its field, and otherwise under
// head ("malformed job JSON: ..."): only input that is not one well-formed
// value is called malformed, where a value at fault is named by its field
// (a malformed one names the field it was found in, under the head).
func Headed(err error, head string) error {
	if Located(err) {
		return err
	}
	return fmt.Errorf("%s: %w", head, err)
}

// MaxDepth is how deep arrays and objects may nest in the input: the
// decoder's own bound (jsontext's, not exported), said in its refusal.
const MaxDepth = 10000

// ErrDuplicateKey is a key an object holds twice, at any depth, also
// inside a value kept as raw JSON (a job's input): which one counts would
// depend on the parser.
var ErrDuplicateKey = errors.New("duplicate key")

// ErrUnknownField is a key that names no field of the type it decodes
// into, also one that names a field only when case is ignored.
var ErrUnknownField = errors.New("unknown field")

// ErrInvalidUTF8 is a string, or a key, that is not valid UTF-8. JSON is
// UTF-8 (RFC 8259): a reader before pmjail may refuse such bytes or read
// them as U+FFFD, and a raw value (a job's input) would reach the guest as
// they are, so which text counts would depend on the parser.
var ErrInvalidUTF8 = errors.New("invalid UTF-8 (JSON text is UTF-8)")

// options are the v2 semantics Decode relies on: duplicate keys and
// invalid UTF-8 are refused, and keys matched exactly, by v2's defaults.
// (encoding/json, which Decode used before, read invalid UTF-8 as U+FFFD.)
var options = json.JoinOptions(
	json.RejectUnknownMembers(true),
)

// Decode decodes data, which must hold exactly one JSON value, into v, a
// non-nil pointer. A key that names no field of the type it decodes into
// (exactly: "Source" is not "source"), and a key an object holds twice,
// are refused, in every object nested in data too.
func Decode(data []byte, v any) error {
	if rv := reflect.ValueOf(v); rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("strictjson: decode into %T: want a non-nil pointer", v) // the caller's mistake
	}
	if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
		return &Error{Err: errors.New("no JSON value")}
	}
	dec := jsontext.NewDecoder(bytes.NewReader(data), options)
	if err := json.UnmarshalDecode(dec, v, options); err != nil {
		return describe(err, reflect.TypeOf(v))
	}
	end := dec.InputOffset()
	if _, err := dec.ReadToken(); err != io.EOF {
		// The whole input is at fault, not a field of its value.
		at := end + int64(len(data[end:])-len(bytes.TrimLeft(data[end:], " \t\r\n")))
		return &Error{Err: fmt.Errorf("data after the JSON value (at byte %d)", at), malformed: true}
	}
	return nil
}

// maxFieldDepth bounds the path a malformed input's Error names: input
// may nest 10,000 deep, and a path that deep is some 30 KiB of "[0]".
// Beyond it the field is the value at that depth that holds the fault.
const maxFieldDepth = 16

// malformedAt is the field a syntax error at ptr names: the path to the
// value the decoder was in, at most maxFieldDepth deep; for input nested
// too deep, the value of t's that holds it as raw JSON (a job's input, a
// batch's jobs[i]), which is what is too deep.
func malformedAt(t reflect.Type, ptr jsontext.Pointer, tooDeep bool) string {
	field, _ := pathTo(t, ptr, maxFieldDepth, tooDeep)
	return field
}

// Valid reports whether Decode would accept data as one JSON value kept
// raw (a json.RawMessage): the same grammar, options and duplicate-key
// rule, checked by the tokenizer alone. It is the fast path for a
// megabyte of a job's input, some eight times quicker than decoding it;
// where it says no, Decode says why.
func Valid(data []byte) bool {
	return jsontext.Value(data).IsValid(options)
}

// describe turns a decoding error into an Error, its place turned from
// the JSON pointer the decoder gives ("/list/1/x") into the path as
// pmjail's messages write it ("list[1].x"), which the type tells.
func describe(err error, t reflect.Type) error {
	if syntax, ok := errors.AsType[*jsontext.SyntacticError](err); ok {
		switch {
		case errors.Is(syntax.Err, jsontext.ErrDuplicateName):
			field, _ := path(t, syntax.JSONPointer)
			return &Error{Field: field, Err: ErrDuplicateKey}
		case strings.HasSuffix(syntax.Err.Error(), "invalid UTF-8"): // jsonwire's error, not exported
			field, _ := path(t, syntax.JSONPointer)
			return &Error{Field: field, Err: fmt.Errorf("%w (at byte %d)", ErrInvalidUTF8, syntax.ByteOffset)}
		case errors.Is(syntax.Err, io.ErrUnexpectedEOF):
			return &Error{Field: malformedAt(t, syntax.JSONPointer, false), Err: errors.New("unexpected end of the JSON"), malformed: true}
		case strings.HasSuffix(syntax.Err.Error(), "exceeded max depth"): // jsontext's, not exported
			return &Error{Field: malformedAt(t, syntax.JSONPointer, true),
				Err: fmt.Errorf("nested deeper than %d arrays and objects (at byte %d)", MaxDepth, syntax.ByteOffset), malformed: true}
		}
		msg := strings.TrimPrefix(syntax.Err.Error(), "jsontext: ")
		return &Error{Field: malformedAt(t, syntax.JSONPointer, false), Err: fmt.Errorf("%s (at byte %d)", msg, syntax.ByteOffset), malformed: true}
	}
	sem, ok := errors.AsType[*json.SemanticError](err)
	if !ok {
		return &Error{Err: err}
	}
	field, in := path(t, sem.JSONPointer)
	switch {
	case errors.Is(sem.Err, json.ErrUnknownName):
		key := sem.JSONPointer.LastToken()
		for _, name := range slices.Sorted(maps.Keys(fieldsOf(in))) {
			if strings.EqualFold(name, key) {
				return &Error{Field: field, Err: fmt.Errorf("%w (keys match case: want %q)", ErrUnknownField, name)}
			}
		}
		return &Error{Field: field, Err: ErrUnknownField}
	case sem.GoType == nil:
		return &Error{Field: field, Err: errors.New(strings.TrimPrefix(err.Error(), "json: "))}
	case ownDecoding(sem.GoType, sem.JSONKind):
		if sem.Err != nil {
			return &Error{Field: field, Err: sem.Err}
		}
	}
	got := kindName(sem.JSONKind)
	if sem.JSONKind == '0' && len(sem.JSONValue) > 0 {
		got += " " + string(sem.JSONValue) // in range is the question
	}
	return &Error{Field: field, Err: fmt.Errorf("want %s, got JSON %s", kind(sem.GoType), got)}
}

// ownDecoding reports whether t's own method decoded the JSON of this
// kind, so that the error is the method's to word.
func ownDecoding(t reflect.Type, k jsontext.Kind) bool {
	p := reflect.PointerTo(t)
	switch {
	case p.Implements(jsonUnmarshaler), p.Implements(jsonUnmarshalerFrom):
		return true
	case p.Implements(textUnmarshaler):
		return k == '"'
	}
	return false
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
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

// jsonUnmarshaler is the v1 interface, which v2 calls as v1 did;
// jsonUnmarshalerFrom v2's own, which reads from the decoder (a type that
// stops early).
var (
	jsonUnmarshaler     = reflect.TypeFor[interface{ UnmarshalJSON([]byte) error }]()
	jsonUnmarshalerFrom = reflect.TypeFor[json.UnmarshalerFrom]()
	textUnmarshaler     = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// path writes a JSON pointer into t's value as a path: a struct's fields
// after dots, a map's keys and keys that are no plain name as ["key"], an
// array's elements as [i]. Under a key that names no field, and inside raw
// JSON, the type no longer tells an index from a key: a number reads as
// an index. in is the struct type whose field the last key is (or would
// be), nil if that is no struct's.
func path(t reflect.Type, ptr jsontext.Pointer) (p string, in reflect.Type) {
	return pathTo(t, ptr, -1, false)
}

// pathTo is path cut short: after max tokens (unless max < 0), and, if
// typed, at the first token inside a value t does not describe (raw
// JSON, or a value of its own decoding).
func pathTo(t reflect.Type, ptr jsontext.Pointer, max int, typed bool) (p string, in reflect.Type) {
	var b strings.Builder
	n := 0
	for tok := range ptr.Tokens() {
		if n == max {
			break
		}
		in = nil
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		var kind reflect.Kind
		if t != nil && !reflect.PointerTo(t).Implements(jsonUnmarshaler) {
			kind = t.Kind()
		}
		if typed && n > 0 && kind == reflect.Invalid {
			break
		}
		n++
		switch kind {
		case reflect.Struct:
			in = t
			f, ok := fieldsOf(t)[tok]
			t = nil
			if ok {
				t = f
			}
			name(&b, tok, false)
		case reflect.Map:
			t = t.Elem()
			name(&b, tok, true)
		case reflect.Slice, reflect.Array:
			t = t.Elem()
			fmt.Fprintf(&b, "[%s]", tok)
		default:
			t = nil
			if _, err := strconv.ParseUint(tok, 10, 0); err == nil {
				fmt.Fprintf(&b, "[%s]", tok)
			} else {
				name(&b, tok, false)
			}
		}
	}
	return b.String(), in
}

// name writes one key of a path: after a dot if it is a field's plain
// name, else quoted in brackets.
func name(b *strings.Builder, key string, quoted bool) {
	if quoted || !plainName(key) {
		fmt.Fprintf(b, "[%q]", key)
		return
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(key)
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

// fieldsOf maps the keys an object decoded into t may hold to their
// fields' types: exported fields under their tag's name, and the fields
// of embedded structs without a name as if they were t's own (t's own
// shadowing theirs).
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	set := map[string]reflect.Type{}
	if t == nil {
		return set
	}
	collectFields(t, set, map[reflect.Type]bool{})
	return set
}

func collectFields(t reflect.Type, set map[string]reflect.Type, visited map[reflect.Type]bool) {
	if visited[t] {
		return
	}
	visited[t] = true
	var embedded []reflect.Type
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
			embedded = append(embedded, ft)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		typ := f.Type
		if strings.Contains(","+opts+",", ",string,") {
			typ = reflect.TypeFor[string]() // a quoted scalar: nothing inside
		}
		set[name] = typ
	}
	for _, e := range embedded {
		deeper := map[string]reflect.Type{}
		collectFields(e, deeper, visited)
		for k, v := range deeper {
			if _, ok := set[k]; !ok {
				set[k] = v
			}
		}
	}
}
