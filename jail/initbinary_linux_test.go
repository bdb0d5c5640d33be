package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	s := initStageIn(dir, want)
	if s.Self || s.Path != filepath.Join(dir, InitBinaryName) || !strings.HasPrefix(s.execPath(), "/proc/self/fd/") {
		t.Fatalf("matching pmjail-init not chosen: %+v", s)
	}
	// The fd it execs through must stay that file: a collected *os.File
	// would close it and let another file take its number.
	runtime.GC()
	runtime.GC()
	held, err := os.Stat(s.execPath())
	if err != nil {
		t.Fatalf("the chosen pmjail-init's fd: %v", err)
	}
	if onDisk, err := os.Stat(s.Path); err != nil || !os.SameFile(held, onDisk) {
		t.Fatalf("%s no longer refers to %s after a GC", s.execPath(), s.Path)
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
