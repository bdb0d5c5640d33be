package kfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestRead(t *testing.T) {
	if b, err := Read("/proc/sys/kernel/cap_last_cap"); err != nil || len(b) == 0 {
		t.Fatalf("cap_last_cap: %q, %v", b, err)
	}
	// Past the first buffer, and past a doubling of it.
	want := bytes.Repeat([]byte("0123456789"), 300)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Read: %d bytes, %v; want %d", len(got), err, len(want))
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
