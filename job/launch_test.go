package job

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pmjail/pmjail/jail"
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
