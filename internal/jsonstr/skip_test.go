package jsonstr

import "testing"

// Outside marks which bytes lie outside strings: escaped quotes and
// backslashes keep a string open, brackets inside one are its own.
func TestOutside(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":[1]}`:    `x...xxxxx`,
		`["\"[",{}]`:   `x.....xxxx`,
		`{"k\\":"]"}`:  `x.....x...x`,
		`[1,"\\\"",2]`: `xxx......xxx`,
	} {
		var o Outside
		got := make([]byte, len(in))
		for i := range len(in) {
			got[i] = '.'
			if o.Next(in[i]) {
				got[i] = 'x'
			}
		}
		if string(got) != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}
