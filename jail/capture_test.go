package jail

import (
	"bytes"
	"strings"
	"testing"
)

// Output across the heap chunk and many mapped ones comes back whole and in
// order, cut at the limit, and text can be asked twice.
func TestCaptureKeepsOutputAcrossChunks(t *testing.T) {
	for _, limit := range []int64{100, firstChunk, firstChunk + 1, 3*mappedChunk + 12345} {
		c := &capture{limit: limit}
		var want bytes.Buffer
		overflows := 0
		for i := 0; want.Len() < int(limit)+50000; i++ {
			p := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*997%40000)
			c.add(p, func() { overflows++ })
			want.Write(p)
		}
		got := c.text()
		if got != want.String()[:limit] || !c.truncated || overflows != 1 {
			t.Fatalf("limit %d: kept %d bytes (prefix ok %v), truncated %v, overflows %d", limit, len(got),
				strings.HasPrefix(want.String(), got), c.truncated, overflows)
		}
		if again := c.text(); again != got {
			t.Fatalf("limit %d: text changed on a second call", limit)
		}
		c.add([]byte("late"), func() {})
		if c.text() != got {
			t.Fatalf("limit %d: output added after text", limit)
		}
	}
	if c := (&capture{limit: 10}); c.text() != "" {
		t.Fatal("no output is not the empty string")
	}
}

func TestCaptureCutsAtTheLimit(t *testing.T) {
	c := &capture{limit: 10}
	overflows := 0
	c.add([]byte("12345678"), func() { overflows++ })
	c.add([]byte("90abc"), func() { overflows++ })
	c.add([]byte("def"), func() { overflows++ })
	if c.text() != "1234567890" || !c.truncated || overflows != 1 {
		t.Fatalf("captured %q truncated %v overflows %d", c.text(), c.truncated, overflows)
	}
}
