// Package strictjson decodes one JSON value the strict way pmjail reads
// every input it is handed (a job, a config, a profile, a guest's call):
// no unknown keys, nothing after the value. Its errors say what is wrong
// in the input's own terms: the path to the value at fault
// ("limits.memory", "ceiling.runtimes[0]") and the JSON wanted there,
// never a Go type's name.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// Error is a problem at one place in the input.
type Error struct {
	// Field is the path to the value at fault, spelt as the input spells
	// it; empty for the value as a whole or where no place is known (a
	// syntax error).
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Decode decodes data, which must hold exactly one JSON value, into v. A
// key that names no field of v's type is refused, in every object nested
// in it too.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describe(err, data, reflect.TypeOf(v))
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return &Error{Msg: "data after the JSON value"}
	}
	return nil
}

// describe turns a decoding error into an Error. encoding/json names the
// field only of a value of the wrong JSON type; for an unknown key and for
// a value its type's UnmarshalJSON refused, the input is walked again to
// find the place.
func describe(err error, data []byte, t reflect.Type) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return &Error{Msg: "no JSON value"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Msg: "unexpected end of the JSON"}
	case errors.As(err, &syntax):
		return &Error{Msg: fmt.Sprintf("%v (at byte %d)", syntax, syntax.Offset)}
	case errors.As(err, &typ):
		return &Error{Field: typ.Field, Msg: fmt.Sprintf("want %s, got JSON %s", kind(typ.Type), typ.Value)}
	}
	if e := locate(data, t, ""); e != nil {
		return e
	}
	return &Error{Msg: strings.TrimPrefix(err.Error(), "json: ")}
}

// kind names the JSON a Go type decodes from, for a reader who never saw
// the Go type.
func kind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
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

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// locate walks data into t as encoding/json does, in the input's order,
// and returns the first unknown key or the first value whose type's own
// UnmarshalJSON refuses it; nil if it finds neither.
func locate(data []byte, t reflect.Type, path string) *Error {
	if t.Kind() == reflect.Pointer {
		if string(bytes.TrimSpace(data)) == "null" {
			return nil // the decoder leaves a nil pointer, asking no one
		}
		return locate(data, t.Elem(), path)
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(data); err != nil {
			return &Error{Field: path, Msg: err.Error()}
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := fieldsOf(t)
		return members(data, func(key string, value []byte) *Error {
			f, ok := fields.find(key)
			if !ok {
				return &Error{Field: join(path, key), Msg: "unknown field"}
			}
			return locate(value, f.typ, join(path, f.name))
		})
	case reflect.Map:
		return members(data, func(key string, value []byte) *Error {
			return locate(value, t.Elem(), path+"["+strconv.Quote(key)+"]")
		})
	case reflect.Slice, reflect.Array:
		return elements(data, func(i int, value []byte) *Error {
			return locate(value, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		})
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// members calls fn with each key and value of the object data holds, in
// order, until fn returns an Error. Data that is not an object has none.
func members(data []byte, fn func(key string, value []byte) *Error) *Error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		var value json.RawMessage
		if err != nil || !ok || dec.Decode(&value) != nil {
			return nil
		}
		if e := fn(key, value); e != nil {
			return e
		}
	}
	return nil
}

// elements is members for an array.
func elements(data []byte, fn func(i int, value []byte) *Error) *Error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil
	}
	for i := 0; dec.More(); i++ {
		var value json.RawMessage
		if dec.Decode(&value) != nil {
			return nil
		}
		if e := fn(i, value); e != nil {
			return e
		}
	}
	return nil
}

type field struct {
	name string
	typ  reflect.Type
}

type fieldSet []field

// fieldsOf lists the fields encoding/json decodes an object into t by:
// exported fields under their tag's name, and the fields of embedded
// structs without one as if they were t's own.
func fieldsOf(t reflect.Type) fieldSet {
	var set fieldSet
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			set = append(set, fieldsOf(ft)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		set = append(set, field{name: name, typ: f.Type})
	}
	return set
}

// find matches a key as encoding/json does: exactly, or else ignoring
// case.
func (s fieldSet) find(key string) (field, bool) {
	for _, f := range s {
		if f.name == key {
			return f, true
		}
	}
	for _, f := range s {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return field{}, false
}
