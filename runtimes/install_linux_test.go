package runtimes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A state directory below one others cannot search is refused up front,
// naming that directory and the setting: the jails' unprivileged ids could
// not open what pmjail binds from it, and each run failed as pmjail's own
// internal_error.
func TestCheckDirs(t *testing.T) {
	base := t.TempDir()
	// t.TempDir makes its directories 0700: open them, and the tree below
	// is what the test sets.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := (&Install{StateDir: base}).CheckDirs(); err != nil {
		t.Skipf("%s lies below a directory others cannot search: %v", base, err)
	}
	modules := filepath.Join(base, "node_modules")
	private := filepath.Join(base, "private")
	for _, d := range []string{modules, private} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	in := &Install{ModulesDir: modules, StateDir: filepath.Join(private, "state")}
	if err := in.CheckDirs(); err != nil {
		t.Fatalf("every directory 0755, state not made yet: %v", err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	err := in.CheckDirs()
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("state below a 0700 directory: %v, want ErrUnreachable", err)
	}
	for _, want := range []string{"state directory " + in.StateDir, "$PMJAIL_STATE_DIR", private + " is not searchable by others (mode 0700)", "chmod o+x " + private} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	// Search is all it takes (o+x): the files in it are pmjail's, 0644.
	if err := os.Chmod(private, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := in.CheckDirs(); err != nil {
		t.Errorf("state below a 0711 directory: %v", err)
	}
	in = &Install{ModulesDir: filepath.Join(private, "node_modules"), StateDir: filepath.Join(base, "state")}
	if err := os.Chmod(private, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := in.CheckDirs(); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "runtime directory") || !strings.Contains(err.Error(), "$PMJAIL_RUNTIME_DIR") {
		t.Errorf("runtimes below a 0750 directory: %v", err)
	}

	// A state directory pmjail makes is 0755 whatever the umask: under
	// 077 it was 0700, and the snapshot built in it was out of the jails'
	// reach.
	fresh := filepath.Join(base, "fresh", "state")
	old := syscall.Umask(0o077)
	err = (&Install{StateDir: fresh}).CheckDirs()
	syscall.Umask(old)
	if err != nil {
		t.Fatalf("a state directory made under umask 077: %v", err)
	}
	for _, d := range []string{filepath.Dir(fresh), fresh} {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o755 {
			t.Errorf("%s made under umask 077: %v, want 0755", d, st.Mode())
		}
	}
}
