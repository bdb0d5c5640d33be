package capread

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := File(small, 5); err != nil || string(data) != "12345" {
		t.Errorf("a file at the cap: %q, %v", data, err)
	}
	for _, tc := range []struct {
		path string
		max  int64
		want string
	}{
		{small, 4, "small is larger than the 4-byte cap"},
		{"/dev/zero", 1 << 20, "/dev/zero is larger than the 1048576-byte cap"},
		{dir, 10, dir + " is a directory"},
		{filepath.Join(dir, "missing"), 10, "no such file or directory"},
	} {
		if _, err := File(tc.path, tc.max); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (cap %d): %v, want an error with %q", tc.path, tc.max, err, tc.want)
		}
	}
}

func TestReader(t *testing.T) {
	if _, err := Reader(strings.NewReader("abc"), "stdin", 2); err == nil || err.Error() != "stdin is larger than the 2-byte cap" {
		t.Errorf("got %v", err)
	} else if e, ok := errors.AsType[*TooLargeError](err); !ok || e.Max != 2 {
		t.Errorf("got %#v, want a *TooLargeError", err)
	}
	if data, err := Reader(strings.NewReader(""), "stdin", 2); err != nil || len(data) != 0 {
		t.Errorf("empty: %q, %v", data, err)
	}
}
