package server

import "testing"

func TestCompleteUTF8(t *testing.T) {
	e := []byte("é") // 0xC3 0xA9
	euro := []byte("€")
	for _, tc := range []struct {
		in   []byte
		want int
	}{
		{[]byte("abc"), 3},
		{append([]byte("a"), e[0]), 1},
		{append([]byte("a"), e...), 3},
		{append([]byte("a"), euro[:2]...), 1},
		{append([]byte("a"), euro...), 4},
		{[]byte{0xff}, 1}, // invalid, not incomplete: passed on
		{nil, 0},
	} {
		if got := completeUTF8(tc.in); got != tc.want {
			t.Errorf("completeUTF8(%x) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
