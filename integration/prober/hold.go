package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// hold writes a secret into the job's own /tmp, says "ready" and waits,
// without spinning, until the file release appears (a file the test
// makes in a directory it bound), at most a minute. It is job A of the
// other-jobs leak test: job B runs while A holds its secret. It refuses
// to run outside a jail (hostname "pmjail").
func hold(release string) int {
	if host, _ := os.Hostname(); host != "pmjail" {
		fmt.Fprintf(os.Stderr, "prober hold: hostname %q: not jailed, refusing to run\n", host)
		return exitNotJailed
	}
	if err := os.WriteFile(filepath.Join("/tmp", "job-a-secret"), []byte("secret\n"), 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "prober hold: %v\n", err)
		return 1
	}
	fmt.Println("ready")
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(release); err == nil {
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "prober hold: %s did not appear within a minute\n", release)
	return 1
}
