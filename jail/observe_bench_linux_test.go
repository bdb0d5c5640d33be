package jail

import (
	"os/exec"
	"testing"
)

// BenchmarkObserve is what reading a contained process back for its
// posture costs the supervisor, every run.
func BenchmarkObserve(b *testing.B) {
	cmd := exec.Command("/bin/sleep", "60")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	for b.Loop() {
		if o := observe(cmd.Process.Pid); o.Error != "" {
			b.Fatal(o.Error)
		}
	}
}
