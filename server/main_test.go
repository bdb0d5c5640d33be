package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/posture"
)

// TestMain lets the test binary play pmjail's child roles (a job's init
// stage, the posture probe), as pmjail's binary does, and points the
// runtimes at the checkout's node_modules.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case initstage.Role:
			initstage.Main()
		case posture.ProbeRole:
			posture.ProbeChild()
		}
	}
	if os.Getenv("PMJAIL_RUNTIME_DIR") == "" {
		if wd, err := os.Getwd(); err == nil {
			os.Setenv("PMJAIL_RUNTIME_DIR", filepath.Join(filepath.Dir(wd), "node_modules"))
		}
	}
	os.Exit(m.Run())
}
