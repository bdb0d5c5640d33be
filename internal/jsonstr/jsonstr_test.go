package jsonstr

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var samples = []string{
	"", "plain", "\x01\x1f\x7f", `quote " backslash \ slash /`, "\b\f\n\r\t", "<html>&amp;",
	"héllo wörld 日本 🎉", "bad \xff\xfe bytes", "cut \xe6\x97", "\u2028\u2029", "\xed\xa0\x80 surrogate",
	strings.Repeat("\x01", 100), strings.Repeat("日", 50) + "\xf0\x9f\x8e",
}

// check compares every way of encoding s with encoding/json's.
func check(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := Append(nil, s); !bytes.Equal(got, want) {
		t.Fatalf("Append(%q) = %s, want %s", s, got, want)
	}
	if n := Len(s); n != len(want) {
		t.Fatalf("Len(%q) = %d, want %d", s, n, len(want))
	}
	if got := Append(nil, []byte(s)); !bytes.Equal(got, want) || Len([]byte(s)) != len(want) {
		t.Fatalf("Append(%q as bytes) = %s, want %s", s, got, want)
	}
	for _, size := range []int{utf8.UTFMax, 5, 7, 64} {
		var buf bytes.Buffer
		if err := writeChunked(&buf, s, size); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("writeChunked(%q, %d) = %s, want %s", s, size, buf.Bytes(), want)
		}
	}
}

func TestMatchesEncodingJSON(t *testing.T) {
	for _, s := range samples {
		check(t, s)
	}
	var all strings.Builder
	for b := range 256 {
		all.WriteByte(byte(b))
	}
	check(t, all.String())
}

func FuzzMatchesEncodingJSON(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Fuzz(check)
}

func TestWriteLarge(t *testing.T) {
	s := strings.Repeat("日\x01x\xff", 20000)
	var buf bytes.Buffer
	if err := Write(&buf, s); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(s)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatal("Write differs from json.Marshal on a string of many chunks")
	}
}
