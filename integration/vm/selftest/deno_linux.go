package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// checkDeno runs `deno eval` twice, cold and with a warm code cache, to show
// a dynamically linked program runs in the VM and what it costs under
// emulation.
func checkDeno(deno string) (string, error) {
	path, err := exec.LookPath(deno)
	if err != nil {
		return "", fmt.Errorf("find deno: %w", err)
	}
	dir, err := os.MkdirTemp("", "selftest-deno-")
	if err != nil {
		return "", fmt.Errorf("deno cache dir: %w", err)
	}
	defer os.RemoveAll(dir)
	var took []string
	for _, run := range []string{"cold", "warm"} {
		cmd := exec.Command(path, "eval", "console.log(1+1)")
		cmd.Env = append(os.Environ(), "DENO_DIR="+dir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("deno eval (%s): %w, output %q", run, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != "2" {
			return "", fmt.Errorf("deno eval (%s) printed %q, want 2", run, got)
		}
		took = append(took, fmt.Sprintf("%s %s", run, time.Since(start).Round(time.Millisecond)))
	}
	return "printed 2; " + strings.Join(took, ", "), nil
}
