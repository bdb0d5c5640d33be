package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// size refuses what is not a whole number, as profiles.Size does: an
// UnmarshalJSON of its own, whose errors encoding/json reports without a
// place.
type size int64

func (s *size) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("invalid size %s", b)
	}
	*s = size(n)
	return nil
}

// counted reads an array from the decoder, as a type that stops early
// does (json.UnmarshalerFrom), and refuses one of more than two values.
type counted int

func (c *counted) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	for n := 1; dec.PeekKind() != ']'; n++ {
		if n > 2 {
			return errors.New("more than 2 values")
		}
		if err := dec.SkipValue(); err != nil {
			return err
		}
		*c = counted(n)
	}
	_, err := dec.ReadToken()
	return err
}

type Embedded struct {
	Shared string `json:"shared"`
}

type limits struct {
	Memory size `json:"memory"`
	Pids   int  `json:"pids"`
}

// Deeper has a field the embedding type's own shadows.
type Deeper struct {
	Shadow int `json:"shadow"`
}

type doc struct {
	Embedded
	Deeper
	Shadow  size              `json:"shadow"`
	Count   uint32            `json:"count"`
	Quoted  int               `json:"quoted,string"`
	Addr    netip.Addr        `json:"addr"`
	Name    string            `json:"name"`
	Limits  limits            `json:"limits"`
	Ptr     *limits           `json:"ptr"`
	List    []limits          `json:"list"`
	ByName  map[string]limits `json:"by_name"`
	Raw     json.RawMessage   `json:"raw"`
	Counted counted           `json:"counted"`
	Skipped string            `json:"-"`
	Plain   int
}

func TestDecodeNamesThePlace(t *testing.T) {
	for _, tc := range []struct{ in, field, msg string }{
		// Unknown keys, at every depth, in the input's order.
		{`{"nmae":"x"}`, "nmae", "unknown field"},
		{`{"limits":{"memroy":1}}`, "limits.memroy", "unknown field"},
		{`{"list":[{},{"pids":1,"x":2}]}`, "list[1].x", "unknown field"},
		{`{"by_name":{"a.b":{"y":1}}}`, `by_name["a.b"].y`, "unknown field"},
		{`{"ptr":{"z":1}}`, "ptr.z", "unknown field"},
		{`{"-":1}`, "-", "unknown field"},
		{`{"":1}`, `[""]`, "unknown field"},
		{`{"limits":{"a.b: c":1}}`, `limits["a.b: c"]`, "unknown field"},
		{`{"limits":{"bad":1},"name":1}`, "limits.bad", "unknown field"},
		// A value its own UnmarshalJSON refuses.
		{`{"limits":{"memory":"lots"}}`, "limits.memory", `invalid size "lots"`},
		{`{"list":[{"memory":1},{"memory":true}]}`, "list[1].memory", "invalid size true"},
		{`{"by_name":{"k":{"memory":[]}}}`, `by_name["k"].memory`, "invalid size []"},
		// A value its own UnmarshalJSONFrom refuses.
		{`{"counted":[1,2,3,4]}`, "counted", "more than 2 values"},
		// The wrong JSON type, named by encoding/json.
		{`{"name":1}`, "name", "want a string, got JSON number"},
		{`{"limits":{"pids":"many"}}`, "limits.pids", "want an integer, got JSON string"},
		{`{"list":{}}`, "list", "want an array, got JSON object"},
		{`[]`, "", "want an object, got JSON array"},
		{`{"list":[{},{"pids":"many"}]}`, "list[1].pids", "want an integer, got JSON string"},
		{`{"by_name":{"k":{"pids":[1]}}}`, `by_name["k"].pids`, "want an integer, got JSON array"},
		{`{"list":[{}, 7]}`, "list[1]", "want an object, got JSON number"},
		{`{"count":-1}`, "count", "want a non-negative integer, got JSON number -1"},
		{`{"name":"ok", "shadow":"x", "quoted":"1"}`, "shadow", "invalid size \"x\""},
		{`{"addr":"not-an-address"}`, "addr", `ParseAddr("not-an-address"): unable to parse IP`},
		{`{"addr":{"x":1}}`, "addr", "want a string, got JSON object"},
		// Not JSON: the input as a whole is at fault, the place the
		// decoder found it so named where it has one.
		{``, "", "no JSON value"},
		{`{"name":`, "name", "unexpected end of the JSON"},
		{`{name}`, "", "invalid character 'a' in literal null (expecting 'u') (at byte 2)"},
		{`{"name": x}`, "name", "invalid character 'x' at start of value (at byte 9)"},
		{`{"limits":{"pids":1,}}`, "limits", "invalid character ',' at start of value (at byte 19)"},
		{`{"raw":{"a":[1,]}}`, "raw.a", "invalid character ']' after object value (expecting ',' or '}') (at byte 15)"},
		// Too deep: the member that holds it, not a path 10,000 deep.
		{`{"raw":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, "raw", "nested deeper than 10000 arrays and objects (at byte 10006)"},
		{`{"raw":{"a":` + strings.Repeat(`{"b":`, 10000), "raw", "nested deeper than 10000 arrays and objects (at byte 50002)"},
		// A fault deep inside: the value 16 deep that holds it.
		{`{"raw":` + strings.Repeat("[", 100) + "x", "raw" + strings.Repeat("[0]", 15), "invalid character 'x' at start of value (at byte 107)"},
		// A key twice in one object, at any depth, raw JSON included.
		{`{"name":"a","name":"b"}`, "name", "duplicate key"},
		{`{"limits":{"pids":1,"pids":2}}`, "limits.pids", "duplicate key"},
		{`{"list":[{},{"memory":1,"memory":1}]}`, "list[1].memory", "duplicate key"},
		{`{"by_name":{"k":{},"k":{}}}`, `by_name["k"]`, "duplicate key"},
		{`{"raw":{"a":[{"b":1,"b":2}]}}`, "raw.a[0].b", "duplicate key"},
		{`{"shared":"a","shared":"b"}`, "shared", "duplicate key"},
		// A key that names a field only when case is ignored.
		{`{"NAME":"x"}`, "NAME", `unknown field (keys match case: want "name")`},
		{`{"name":"x","Name":"y"}`, "Name", `unknown field (keys match case: want "name")`},
		{`{"limits":{"Memory":1}}`, "limits.Memory", `unknown field (keys match case: want "memory")`},
		{`{"plain":1}`, "plain", `unknown field (keys match case: want "Plain")`},
		{`{"SHARED":1}`, "SHARED", `unknown field (keys match case: want "shared")`},
		{`{"by_name":{"k":{"PIDS":1}}}`, `by_name["k"].PIDS`, `unknown field (keys match case: want "pids")`},
		{`{} {}`, "", "data after the JSON value (at byte 3)"},
		{`{} ]`, "", "data after the JSON value (at byte 3)"},
		{"{}\f", "", "data after the JSON value (at byte 2)"},
	} {
		var d doc
		err := Decode([]byte(tc.in), &d)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: error %v (%T), want an *Error", tc.in, err, err)
			continue
		}
		if e.Field != tc.field || e.Err.Error() != tc.msg {
			t.Errorf("%s: field %q msg %q, want %q %q", tc.in, e.Field, e.Err, tc.field, tc.msg)
		}
	}
}

func TestDecodeAcceptsWhatEncodingJSONDoes(t *testing.T) {
	in := `{"shared":"s","name":"n","limits":{"memory":5,"pids":2},"ptr":null,
		"list":[{"memory":1}],"by_name":{"k":{}},"raw":{"any":[1,{"x":2}]},"Plain":3}  `
	var d doc
	if err := Decode([]byte(in), &d); err != nil {
		t.Fatal(err)
	}
	if d.Shared != "s" || d.Name != "n" || d.Limits.Memory != 5 || d.Plain != 3 || len(d.List) != 1 ||
		!strings.Contains(string(d.Raw), `"any"`) {
		t.Fatalf("decoded %+v", d)
	}
}

// A type that embeds itself is walked without end by no one.
type selfEmbedding struct {
	*selfEmbedding
	Size size `json:"size"`
}

func TestDecodeSelfEmbedding(t *testing.T) {
	var v selfEmbedding
	var e *Error
	if err := Decode([]byte(`{"size":"big"}`), &v); !errors.As(err, &e) || e.Field != "size" {
		t.Fatalf("got %v", err)
	}
	if err := Decode([]byte(`{"size":5}`), &v); err != nil || v.Size != 5 || v.selfEmbedding != nil {
		t.Fatalf("got %+v, %v", v, err)
	}
}

// A nil or non-pointer v is the caller's mistake, not the input's: no
// *Error blames a field or the input.
func TestDecodeNeedsAPointer(t *testing.T) {
	var d doc
	for _, v := range []any{nil, (*doc)(nil), d} {
		if err := Decode([]byte(`{}`), v); err == nil || errors.As(err, new(*Error)) {
			t.Errorf("%T: %v, want an error that is no *Error", v, err)
		}
	}
}

func TestErrorText(t *testing.T) {
	if got := Errorf("limits.memory", "m %d", 1).Error(); got != "limits.memory: m 1" {
		t.Errorf("got %q", got)
	}
	if got := (&Error{Err: errors.New("m")}).Error(); got != "m" {
		t.Errorf("got %q", got)
	}
	wrapped := fmt.Errorf("invalid job: %w", Errorf("runtime", "%w", io.EOF))
	if e, ok := errors.AsType[*Error](wrapped); !ok || e.Field != "runtime" || !errors.Is(wrapped, io.EOF) {
		t.Errorf("%v: the field and the wrapped error are not both found", wrapped)
	}
}

// FuzzDecode: whatever the input, Decode neither panics nor answers with
// anything but an *Error, it accepts nothing encoding/json's strict
// decoding refuses, refuses what it accepts only for a key twice, a key
// in the wrong case or invalid UTF-8 (which encoding/json reads as
// U+FFFD), and what it accepts decodes to the same value: a decoder that agreed on the verdict but filled a field differently would
// let a job mean one thing to a proxy and another to the jail.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"name":"n","limits":{"memory":"64M","pids":3},"list":[{"memory":1}],"by_name":{"k":{}}}`,
		`{"list":[{},{"pids":"x"}]}`, `{"by_name":{"a":{"memory":[]}}}`, `{"":{"x":1}}`,
		`{"ptr":null,"raw":{"a":[1,2]},"addr":"::1","quoted":"5"}`, `[1]`, `{} {}`, `{"shadow":"x"`,
		`{"name":"a","NAME":"b"}`, `{"quoted":"00"}`, `{"raw":{"k":1,"k":2}}`, `{"Plain":1,"plain":2}`, "{\"name\":\"\xff\"}",
		" ", ` {"raw":1} `, `"\ud800"`, `{"raw":{"k":1,"\u006b":2}}`, `1 2`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var raw json.RawMessage
		if rawErr := Decode(data, &raw); Valid(data) != (rawErr == nil) {
			t.Fatalf("%q: Valid says %v, Decode into raw JSON says %v", data, Valid(data), rawErr)
		}
		var d doc
		err := Decode(data, &d)
		if err != nil {
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Fatalf("%q: error %v is a %T, not an *Error", data, err, err)
			}
		}
		var std doc
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		stdErr := dec.Decode(&std)
		if stdErr == nil {
			if _, after := dec.Token(); after != io.EOF {
				stdErr = errors.New("data after the value")
			}
		}
		if err == nil && stdErr != nil {
			t.Fatalf("%q: Decode accepts it, encoding/json says %v", data, stdErr)
		}
		// A ",string" number is read by JSON's number grammar, where
		// encoding/json took Go's ("00"); pmjail's types have none.
		quoted := false
		if e, ok := errors.AsType[*Error](err); ok && e.Field == "quoted" {
			quoted = true
		}
		if err != nil && stdErr == nil && !errors.Is(err, ErrDuplicateKey) && !errors.Is(err, ErrUnknownField) && !errors.Is(err, ErrInvalidUTF8) && !quoted {
			t.Fatalf("%q: Decode says %v, encoding/json accepts it", data, err)
		}
		if err == nil && !reflect.DeepEqual(d, std) {
			t.Fatalf("%q: Decode gave %+v, encoding/json %+v", data, d, std)
		}
	})
}

// Invalid UTF-8 was read as U+FFFD, in a job's source, labels and keys,
// and passed as it was inside raw JSON (a job's input): a reader before
// pmjail that refused it, or kept the bytes, saw another text than what
// ran. It is refused, naming the value that holds it.
func TestDecodeRefusesInvalidUTF8(t *testing.T) {
	for in, field := range map[string]string{
		"{\"name\":\"a\xffb\"}":                               "name",
		"{\"limits\":{\"memory\":\"6\xc3\"}}":                 "limits.memory",
		"{\"by_name\":{\"k\":{\"memory\":\"\xed\xa0\x80\"}}}": `by_name["k"].memory`, // an encoded surrogate
		"{\"raw\":{\"x\":[1,\"\xff\"]}}":                      "raw.x[1]",
		"{\"by_name\":{\"\xff\":{}}}":                         "by_name",
	} {
		var d doc
		err := Decode([]byte(in), &d)
		e, ok := errors.AsType[*Error](err)
		if !ok || !errors.Is(err, ErrInvalidUTF8) || e.Field != field {
			t.Errorf("%q: %v, want invalid UTF-8 at %q", in, err, field)
		}
		var raw json.RawMessage
		if Valid([]byte(in)) || Decode([]byte(in), &raw) == nil {
			t.Errorf("%q: valid as raw JSON", in)
		}
	}
	// Escaped, every code point is UTF-8 again.
	var d doc
	if err := Decode([]byte(`{"name":"\u00e9\ufffd"}`), &d); err != nil || d.Name != "\u00e9\ufffd" {
		t.Errorf("escaped text: %q %v", d.Name, err)
	}
}

func TestLocated(t *testing.T) {
	var v struct {
		A struct{ B int } `json:"a"`
	}
	for in, want := range map[string]bool{
		`{"a":{"B":"x"}}`: true,  // a value at fault
		`{"a":{"C":1}}`:   true,  // an unknown key
		`{"a":`:           false, // malformed
		`[1]`:             false, // the whole value
		`{} {}`:           false, // trailing data
	} {
		err := Decode([]byte(in), &v)
		if err == nil || Located(err) != want {
			t.Errorf("%s: %v: Located %v, want %v", in, err, Located(err), want)
		}
	}
	if Located(errors.New("other")) || Located(nil) {
		t.Error("Located accepted an error that is not an *Error")
	}
}

func TestHeaded(t *testing.T) {
	var v struct{ A int }
	located := Decode([]byte(`{"A":"x"}`), &v)
	if err := Headed(located, "malformed"); err != located {
		t.Errorf("a located error: %v, want it as it is", err)
	}
	whole := Decode([]byte(`[1]`), &v)
	if err := Headed(whole, "malformed"); !errors.Is(err, whole) || err.Error() != "malformed: "+whole.Error() {
		t.Errorf("the whole value at fault: %v, want it under the head", err)
	}
}
