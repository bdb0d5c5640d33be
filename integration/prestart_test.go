package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLI_RunTakesItsPrestartedInitStage: the CLI starts its run's init
// stage while it builds the job, and the run takes that one (the log's
// prestarted=true), rather than starting a second.
func TestCLI_RunTakesItsPrestartedInitStage(t *testing.T) {
	before := snapshotHost(t)
	path := filepath.Join(t.TempDir(), "hello.js")
	writeFile(t, path, `console.log("hi")`)
	cmd := exec.Command(pmjail, "run", path)
	cmd.Env = append(os.Environ(), "PMJAIL_LOG=info")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.String() != "hi\n" {
		t.Fatalf("run: %v, stdout %q, stderr %q", err, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "prestarted=true") {
		t.Errorf("the run did not take its prestarted init stage: %s", errb.String())
	}
	if n := jobCgroups(cmd.Process.Pid); len(n) > 0 {
		t.Errorf("cgroups left: %v", n)
	}
	assertNothingLeft(t, before)
}

// TestCleanup_RunEndedBeforeItsJail: a run that ends before its jail (a
// program that does not exist) never takes the init stage started for it,
// which goes with the CLI, its cgroup with it.
func TestCleanup_RunEndedBeforeItsJail(t *testing.T) {
	before := snapshotHost(t)
	cmd, out := startPmjail(t, "exec", "--", "/nonexistent-program")
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 127 {
		t.Fatalf("exec of a missing program: %v, want exit 127; output %q", err, out.String())
	}
	if n := jobCgroups(cmd.Process.Pid); len(n) > 0 {
		t.Errorf("cgroups left: %v", n)
	}
	assertNothingLeft(t, before)
}
