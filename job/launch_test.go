package job

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/rootfs"
)

// What a run that never reaches the jail answers: a native program the
// jail cannot run is refused with a shell's exit code; a runtime that is
// not installed is pmjail's own failure.
func TestLaunchFailures(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req    Request
		status jail.Status
		exit   int
	}{
		{Request{Exec: &Exec{Program: "/nonexistent/pmjail-test"}}, jail.StatusRefused, 127},
		{Request{Exec: &Exec{Program: "no-such-program-pmjail-test"}}, jail.StatusRefused, 127},
		{Request{Exec: &Exec{Program: notExec}}, jail.StatusRefused, 126},
		{Request{Exec: &Exec{Program: "/bin/true", Binds: []string{"relative"}}}, jail.StatusRefused, 125},
		// Over the jail's root: it was pmjail's internal_error.
		{Request{Exec: &Exec{Program: "/bin/true", Binds: []string{"/etc:/"}}}, jail.StatusRefused, 125},
		{Request{Exec: &Exec{Program: "/bin/true", Binds: []string{"/etc:/x/.."}}}, jail.StatusRefused, 125},
		// Over, or above, what the jail binds of its own: the program, a
		// library, a device. Each was internal_error.
		{Request{Exec: &Exec{Program: "/bin/true", Binds: []string{"/etc:/bin/true"}}}, jail.StatusRefused, 125},
		{Request{Exec: &Exec{Program: "/bin/true", Binds: []string{"/etc:/bin"}}}, jail.StatusRefused, 125},
		{Request{Exec: &Exec{Program: "/bin/true", Binds: []string{"/etc:/dev"}}}, jail.StatusRefused, 125},
		{Request{Exec: &Exec{Program: "/bin/true", Binds: []string{"/etc:/dev/null"}}}, jail.StatusRefused, 125},
		{Request{Exec: &Exec{Program: "/bin/true", Binds: []string{"/etc:" + filepath.Dir(loader(t))}}}, jail.StatusRefused, 125},
		{Request{Runtime: "deno", Source: "1"}, jail.StatusInternalError, 125},
	} {
		r, err := Resolve(&tc.req, DefaultCeiling(), false)
		if err != nil {
			t.Fatalf("%+v: %v", tc.req, err)
		}
		rn := &Runner{} // no runtimes installed
		res := rn.Run(context.Background(), r, Options{Stdout: io.Discard, Stderr: io.Discard})
		if res.Status != tc.status || res.ExitCode != tc.exit || res.Error == nil {
			t.Errorf("%+v: status %s exit %d error %+v, want %s %d", tc.req.Exec, res.Status, res.ExitCode, res.Error, tc.status, tc.exit)
		}
	}
}

// loader is the ELF interpreter /bin/true names, as the jail binds it.
func loader(t *testing.T) string {
	libs, err := rootfs.SharedLibraries("/bin/true", "/bin/true")
	if err != nil || len(libs.Files) == 0 {
		t.Fatalf("libraries of /bin/true: %v %v", libs.Files, err)
	}
	for _, f := range libs.Files {
		if strings.Contains(filepath.Base(f), "ld-") {
			return f
		}
	}
	return libs.Files[0]
}
