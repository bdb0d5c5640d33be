package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// A size or a duration is taken exactly when the OpenAPI document's
// schema takes it, as the project's own schema checker reads it, so
// that a proxy that holds jobs to the document runs what pmjail runs:
// white space other than the ASCII spaces every regular-expression
// engine's \s matches (a vertical tab, a no-break space, U+0085, an
// ideographic space) was trimmed and the value taken, where the
// document refused it. And a value over the largest is refused saying
// so: a count of milliseconds whose nanoseconds overflow was wrapped
// round to another duration ("288230376151716728" was 5s), and the
// message of one too large said "want milliseconds" of milliseconds.
func TestUnitsAsTheDocumentSpellsThem(t *testing.T) {
	d := load(t)
	var sizes, durations []string
	for _, sp := range []string{"", " ", "\t", "\n", "\f", "\r", "\v", "\u0085", "\u00a0", "\u1680", "\u2000", "\u2028", "\u3000", "\ufeff", "\x1c"} {
		for _, v := range []string{"64M", "1048576", "1Gi", "0"} {
			sizes = append(sizes, quote(sp+v), quote(v+sp), quote(sp+v+sp))
		}
		for _, v := range []string{"2s", "500", "1m30s", "1.5h"} {
			durations = append(durations, quote(sp+v), quote(v+sp), quote(sp+v+sp))
		}
	}
	// A pattern cannot bound a string's number (its description says
	// the largest), so a string over it is left to the messages below.
	sizes = append(sizes, `1125899906842624`, `1125899906842625`, `1.0`, `1.5`, `-1`, `"1048576G"`)
	durations = append(durations, `1099511627776`, `1099511627777`, `1.5`, `-1`, `"1099511627776"`)
	for _, tc := range []struct {
		ptr    string
		values []string
		parse  func([]byte) error
	}{
		{"#/components/schemas/Size", sizes, func(b []byte) error { var s api.Size; return json.Unmarshal(b, &s) }},
		{"#/components/schemas/Duration", durations, func(b []byte) error { var d api.Duration; return json.Unmarshal(b, &d) }},
	} {
		for _, v := range tc.values {
			b := []byte(v)
			docErr, parseErr := d.Value(tc.ptr, b), tc.parse(b)
			if (docErr == nil) != (parseErr == nil) {
				t.Errorf("%s %s: the document says %v, the parser %v", tc.ptr, b, docErr, parseErr)
			}
		}
	}

	for _, tc := range []struct {
		json, err string
		size      bool
	}{
		{`"17179869184G"`, `invalid size "17179869184G" (over 1048576G, the largest)`, true},
		{`"99999999999999999999"`, `invalid size "99999999999999999999" (over 1048576G, the largest)`, true},
		{`18446744073709551615`, `invalid size 18446744073709551615 (over 1048576G, the largest)`, true},
		{`1125899906842625`, `invalid size 1125899906842625 (over 1048576G, the largest)`, true},
		{`1.5`, `invalid size 1.5 (want a whole number of bytes)`, true},
		{`"288230376151716728"`, `invalid duration "288230376151716728" (over 1099511627776 milliseconds, the largest)`, false},
		{`"99999999999999999999"`, `invalid duration "99999999999999999999" (over 1099511627776 milliseconds, the largest)`, false},
		{`9223372036854`, `invalid duration 9223372036854 (over 1099511627776 milliseconds, the largest)`, false},
		{`"3000000h"`, `invalid duration "3000000h" (over 305419h53m47.776s, the largest)`, false},
		{`"305420h"`, `invalid duration "305420h" (over 305419h53m47.776s, the largest)`, false},
		{`-1`, `invalid duration -1 (want milliseconds, 0 or more)`, false},
		{`"2x"`, `invalid duration "2x" (want e.g. "2s", "500ms" or milliseconds)`, false},
	} {
		var err error
		if tc.size {
			var s api.Size
			err = json.Unmarshal([]byte(tc.json), &s)
		} else {
			var d api.Duration
			err = json.Unmarshal([]byte(tc.json), &d)
		}
		if err == nil || err.Error() != tc.err {
			t.Errorf("%s: %v, want %q", tc.json, err, tc.err)
		}
	}
	// The largest of each is taken, in each spelling.
	for _, v := range []string{`1125899906842624`, `"1048576G"`, `" 1125899906842624 "`} {
		var s api.Size
		if err := json.Unmarshal([]byte(v), &s); err != nil || s != 1<<50 {
			t.Errorf("size %s: %v %v, want 1048576G", v, s, err)
		}
	}
	for _, v := range []string{`1099511627776`, `"1099511627776"`} {
		var d api.Duration
		if err := json.Unmarshal([]byte(v), &d); err != nil || !strings.HasPrefix(d.String(), "305419h") {
			t.Errorf("duration %s: %v %v, want 2^40 ms", v, d, err)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
