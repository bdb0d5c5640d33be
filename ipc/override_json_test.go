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

// jsonOverridesByTokens is the values of body's top-level _method
// members, by encoding/json's own tokens: slow, and the reference the
// fast walk is held to.
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

// firstDenied is the first of vs whose method, as the check has always
// read one (strings.ToUpper(strings.TrimSpace(v))), is not in allowed:
// the reference the check without the heap is held to.
func firstDenied(vs, allowed []string) (string, bool) {
	for _, v := range vs {
		if !slices.Contains(allowed, strings.ToUpper(strings.TrimSpace(v))) {
			return v, true
		}
	}
	return "", false
}

// overrideRules are sets of methods an override may name, to check with.
var overrideRules = [][]string{nil, {"GET"}, {"POST", "DELETE"}, AllMethods}

// TestJSONOverrides: the walk finds every top-level _method member (in any
// case, escaped or not, given twice) and nothing nested or in a string,
// as encoding/json's tokens do, and denies the first that names a method
// not allowed.
func TestJSONOverrides(t *testing.T) {
	for _, c := range []struct {
		body string
		want []string
	}{
		{`{"_method":"DELETE"}`, []string{"DELETE"}},
		{` { "a" : [1, {"_method":"PUT"}, "}]\"{"] , "_METHOD" : "delete" } `, []string{"delete"}},
		{`{"_method":"DELETE","_method":"GET"}`, []string{"DELETE", "GET"}},
		{`{"_method":"GET","_method":"DELETE"}`, []string{"GET", "DELETE"}},
		{`{"\u005fmethod":"PATCH","_m\u0065thod":"PUT"}`, []string{"PATCH", "PUT"}},
		{`{"_method":1,"_method":null,"_method":{"a":"DELETE"},"_method":"\u0044ELETE"}`, []string{"", "DELETE"}}, // null is "" to Go, and denied
		{`{"a":"_method","b":{"_method":"DELETE"},"c":["_method","DELETE"]}`, nil},
		{`{"a":1.5e3,"b":true,"c":false,"d":null,"_method":"POST"}`, []string{"POST"}},
		{`{"x\\":"\\","_method":"PUT"}`, []string{"PUT"}},
		{`{"_method":" g\u0065t\n","_method":"po\u017ft","_method":"g\u0131t"}`, []string{" get\n", "poſt", "gıt"}},
		{`{"_method":"GE T","_method":"GET\u00a0","_method":"\ud83d\ude00","_method":"\udc00"}`, []string{"GE T", "GET\u00a0", "😀", "\ufffd"}},
		{`[{"_method":"DELETE"}]`, nil},
		{`{"_method":"DELETE"`, nil},
		{`{}`, nil},
		{``, nil},
		{`"_method"`, nil},
	} {
		if ref := jsonOverridesByTokens(c.body); !slices.Equal(ref, c.want) {
			t.Errorf("tokens of %s: %q, want %q", c.body, ref, c.want)
		}
		for _, allowed := range overrideRules {
			v, denied := deniedJSON(c.body, allowed)
			wv, wdenied := firstDenied(c.want, allowed)
			if v != wv || denied != wdenied {
				t.Errorf("deniedJSON(%s, %q) = %q, %v; want %q, %v", c.body, allowed, v, denied, wv, wdenied)
			}
		}
	}
}

// FuzzJSONOverrides holds the walk to encoding/json's tokens.
func FuzzJSONOverrides(f *testing.F) {
	for _, s := range []string{`{"_method":"DELETE"}`, `{"a":[{"_method":"x"}],"_Method":"y"}`, `{"\u005fmethod":"z"}`, `{"a":"\"}","_method":"w"}`,
		`{"\u005F\u004Dethod":"a",".method":"b"," _method":"c","_metho\u0064":"\u0050OST","\u212aey":1,"_met\/od":2}`,
		`{"_method":"get","_method":" P\u004fST\t","_method":"po\u017ft","_method":"\ud800\udc00","_method":"GET\u2028"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		ref := jsonOverridesByTokens(body)
		for _, allowed := range overrideRules {
			v, denied := deniedJSON(body, allowed)
			if wv, wdenied := firstDenied(ref, allowed); v != wv || denied != wdenied {
				t.Fatalf("deniedJSON(%q, %q) = %q, %v; tokens %q", body, allowed, v, denied, ref)
			}
		}
	})
}

// FuzzOverrideValue: the check without the heap reads a header's value,
// and a form field's value once unescaped, as strings.ToUpper and
// strings.TrimSpace do.
func FuzzOverrideValue(f *testing.F) {
	for _, s := range []string{"GET", " post ", "g et", "poſt", "gıt", "GET\u0085", "\u00a0PUT", "P%4FST", "+get+", "get%", "%zzGET",
		"%C5%BFet", "GET\xc4", "\xc4GET", "GET\xff\xfe", "OPTIONSS", "\u3000OPTIONS\u3000", "p%c4%b1t", "%e2%80%a8GET"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, allowed := range overrideRules {
			_, want := firstDenied([]string{v}, allowed)
			if got := !methodAllowed(allowed, v); got != want {
				t.Fatalf("methodAllowed(%q, %q) denies: %v, want %v", allowed, v, got, want)
			}
			_, want = firstDenied([]string{unescape(v)}, allowed)
			if got := !fieldMethod(v).in(allowed); got != want {
				t.Fatalf("fieldMethod(%q).in(%q) denies: %v, want %v (unescaped %q)", v, allowed, got, want, unescape(v))
			}
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
	allocs := testing.AllocsPerRun(3, func() { deniedJSON(body, []string{"POST"}) })
	t0 := time.Now()
	v, denied := deniedJSON(body, []string{"POST"})
	d := time.Since(t0)
	t.Logf("%d bytes: %s, %.0f allocations", len(body), d, allocs)
	if v != "GET" || !denied {
		t.Fatalf("got %q, %v", v, denied)
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
