package sibling

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestIn: a sibling is used only when it is the build the running binary
// recorded; anything else is refused with a reason. The test binary stands
// in for a sibling.
func TestIn(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	want := strings.TrimSpace(string(out))
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	got, err := BuildID(f)
	f.Close()
	if err != nil || got != want {
		t.Fatalf("BuildID = %q, %v; go tool buildid says %q", got, err, want)
	}

	dir := t.TempDir()
	const name = "pmjail-helper"
	if _, err := In(dir, name, want); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing sibling: %v", err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := In(dir, name, want); err != nil || p != filepath.Join(dir, name) {
		t.Errorf("matching sibling not chosen: %q, %v", p, err)
	}
	if _, err := In(dir, name, "another/build"); err == nil || !strings.Contains(err.Error(), "another build") {
		t.Errorf("sibling of another build: %v", err)
	}
	if _, err := In(dir, name, ""); !errors.Is(err, ErrNoBuildID) {
		t.Errorf("no recorded build: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := In(dir, name, want); err == nil || !strings.Contains(err.Error(), "ELF") {
		t.Errorf("sibling that is no ELF binary: %v", err)
	}
}
