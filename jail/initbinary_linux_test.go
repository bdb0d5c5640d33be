package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitStageChoice: pmjail-init is used only when it is the build the
// running binary recorded; anything else falls back to the running binary
// with a reason. The test binary stands in for a pmjail-init.
func TestInitStageChoice(t *testing.T) {
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
	got, err := goBuildID(f)
	f.Close()
	if err != nil || got != want {
		t.Fatalf("goBuildID = %q, %v; go tool buildid says %q", got, err, want)
	}

	dir := t.TempDir()
	if s := initStageIn(dir, want); !s.Self || !strings.Contains(s.Reason, "no such file") {
		t.Errorf("missing pmjail-init: %+v", s)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, InitBinaryName), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if s := initStageIn(dir, want); s.Self || s.Path != filepath.Join(dir, InitBinaryName) {
		t.Errorf("matching pmjail-init not chosen: %+v", s)
	}
	if s := initStageIn(dir, "another/build"); !s.Self || !strings.Contains(s.Reason, "another build") {
		t.Errorf("pmjail-init of another build: %+v", s)
	}
	if s := initStageIn(dir, ""); !s.Self || !strings.Contains(s.Reason, "built without") {
		t.Errorf("no recorded build: %+v", s)
	}
	if err := os.WriteFile(filepath.Join(dir, InitBinaryName), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if s := initStageIn(dir, want); !s.Self || !strings.Contains(s.Reason, "ELF") {
		t.Errorf("pmjail-init that is no ELF binary: %+v", s)
	}
}
