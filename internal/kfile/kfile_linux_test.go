package kfile

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

func TestStart(t *testing.T) {
	state, start, err := Start(os.Getpid())
	if err != nil || state != 'R' || start == "" || strings.Trim(start, "0123456789") != "" {
		t.Fatalf("Start(self) = %q, %q, %v; want running and a tick count", state, start, err)
	}
	if _, again, _ := Start(os.Getpid()); again != start {
		t.Errorf("the start time moved: %s then %s", start, again)
	}
	// A child that exited is a zombie until reaped, with its start kept;
	// then it is gone.
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if state, s, err := Start(pid); err != nil || state != 'Z' || s == "" {
		t.Errorf("Start(zombie) = %q, %q, %v; want Z and its start", state, s, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Start(pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start(reaped) error %v, want one wrapping os.ErrNotExist", err)
	}
}
