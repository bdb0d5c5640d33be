package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitStageBinary: a pmjail built by `make build` (the one under test
// when PMJAIL_BIN is set, as `make test` does) runs its jobs' init stages
// from the pmjail-init beside it; one built by plain `go build` (the
// harness's own) is its own init stage and says why. Both run jobs.
func TestInitStageBinary(t *testing.T) {
	v := pmjailCmd(t, "", "version")
	if v.ExitCode != 0 {
		t.Fatalf("pmjail version: exit %d, %s", v.ExitCode, v.Stderr)
	}
	if os.Getenv("PMJAIL_BIN") != "" {
		want := "init stage: " + filepath.Join(filepath.Dir(pmjail), "pmjail-init")
		if !strings.Contains(v.Stdout, want+"\n") {
			t.Fatalf("pmjail version says %q, want %q: a make-built pmjail must use its pmjail-init", v.Stdout, want)
		}
	} else if !strings.Contains(v.Stdout, "init stage: this binary (") {
		t.Fatalf("pmjail version says %q, want the binary itself as init stage", v.Stdout)
	}
	r := runScript(t, "hello.js", `console.log("hello")`)
	if r.Status != "ok" || r.Stdout != "hello\n" {
		t.Fatalf("run: status %s stdout %q error %+v", r.Status, r.Stdout, r.Error)
	}
}
