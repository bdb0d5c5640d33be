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

// TestFileSized reads a regular file into one buffer of its size, and
// still reads to the end of one whose stat says less (/proc's say 0).
func TestFileSized(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	want := strings.Repeat("x", 100_000)
	if err := os.WriteFile(path, []byte(want), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := File(path, int64(len(want)))
	if err != nil || string(data) != want {
		t.Fatalf("read %d bytes, %v", len(data), err)
	}
	if cap(data) != len(want)+1 {
		t.Errorf("buffer of %d bytes for a %d-byte file: grown while reading", cap(data), len(want))
	}
	if _, err := File(path, int64(len(want)-1)); err == nil {
		t.Error("a file over the cap was read")
	}
	status, err := File("/proc/self/status", 1<<20)
	if err != nil || !strings.Contains(string(status), "\nPid:") {
		t.Errorf("/proc/self/status: %q, %v", status, err)
	}
}
