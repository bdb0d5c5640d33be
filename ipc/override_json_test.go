package ipc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// jsonOverridesByTokens is jsonOverrides by encoding/json's own tokens:
// slow, and the reference the fast walk is held to.
func jsonOverridesByTokens(body string) []string {
	if !json.Valid([]byte(body)) {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []string
	for dec.More() {
		k, _ := dec.Token()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return out
		}
		var v string
		if strings.EqualFold(k.(string), overrideParam) && json.Unmarshal(raw, &v) == nil {
			out = append(out, v)
		}
	}
	return out
}

// TestJSONOverrides: the walk finds every top-level _method member (in any
// case, escaped or not, given twice) and nothing nested or in a string,
// as encoding/json's tokens do.
func TestJSONOverrides(t *testing.T) {
	for _, c := range []struct {
		body string
		want []string
	}{
		{`{"_method":"DELETE"}`, []string{"DELETE"}},
		{` { "a" : [1, {"_method":"PUT"}, "}]\"{"] , "_METHOD" : "delete" } `, []string{"delete"}},
		{`{"_method":"DELETE","_method":"GET"}`, []string{"DELETE", "GET"}},
		{`{"\u005fmethod":"PATCH","_m\u0065thod":"PUT"}`, []string{"PATCH", "PUT"}},
		{`{"_method":1,"_method":null,"_method":{"a":"DELETE"},"_method":"\u0044ELETE"}`, []string{"", "DELETE"}}, // null is "" to Go, and denied
		{`{"a":"_method","b":{"_method":"DELETE"},"c":["_method","DELETE"]}`, nil},
		{`{"a":1.5e3,"b":true,"c":false,"d":null,"_method":"POST"}`, []string{"POST"}},
		{`{"x\\":"\\","_method":"PUT"}`, []string{"PUT"}},
		{`[{"_method":"DELETE"}]`, nil},
		{`{"_method":"DELETE"`, nil},
		{`{}`, nil},
		{``, nil},
		{`"_method"`, nil},
	} {
		got, ref := jsonOverrides(c.body), jsonOverridesByTokens(c.body)
		if !slices.Equal(got, c.want) || !slices.Equal(ref, c.want) {
			t.Errorf("jsonOverrides(%s) = %q (tokens %q), want %q", c.body, got, ref, c.want)
		}
	}
}

// FuzzJSONOverrides holds the walk to encoding/json's tokens.
func FuzzJSONOverrides(f *testing.F) {
	for _, s := range []string{`{"_method":"DELETE"}`, `{"a":[{"_method":"x"}],"_Method":"y"}`, `{"\u005fmethod":"z"}`, `{"a":"\"}","_method":"w"}`,
		`{"\u005F\u004Dethod":"a",".method":"b"," _method":"c","_metho\u0064":"\u0050OST","\u212aey":1,"_met\/od":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if got, ref := jsonOverrides(body), jsonOverridesByTokens(body); !slices.Equal(got, ref) {
			t.Fatalf("jsonOverrides(%q) = %q, tokens %q", body, got, ref)
		}
	})
}

// TestJSONOverridesCheap: looking through a large JSON body of short
// members costs about what checking it is valid costs, and no heap to
// speak of (a map of its members cost ~80 ms and 20 bytes a byte).
func TestJSONOverridesCheap(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("{")
	for i := 0; b.Len() < 3<<20; i++ {
		fmt.Fprintf(&b, `"%x":0,`, i)
	}
	b.WriteString(`"_method":"GET"}`)
	body := b.String()
	allocs := testing.AllocsPerRun(3, func() { jsonOverrides(body) })
	t0 := time.Now()
	got := jsonOverrides(body)
	d := time.Since(t0)
	t.Logf("%d bytes: %s, %.0f allocations", len(body), d, allocs)
	if !slices.Equal(got, []string{"GET"}) {
		t.Fatalf("got %q", got)
	}
	if allocs > 64 {
		t.Errorf("%.0f allocations for one look, want a few", allocs)
	}
}

// isOverrideNameByMap is isOverrideName as it was, by Unicode folding: the
// reference the byte compare is held to.
func isOverrideNameByMap(name string) bool {
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

// FuzzOverrideField: a query or form field's name is _method without the
// heap exactly when it is once unescaped.
func FuzzOverrideField(f *testing.F) {
	for _, s := range []string{"_method", "%5Fmethod", "++_METHOD", "%20.method", "[method", "_method%", "_method%zz", "+%5fmeth%6Fd", "_meth%C3%B6d", "%2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if got, ref := isOverrideField(name), isOverrideNameByMap(unescape(name)); got != ref {
			t.Fatalf("isOverrideField(%q) = %v, unescaped %v", name, got, ref)
		}
	})
}
