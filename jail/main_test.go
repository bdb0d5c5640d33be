package jail

import (
	"os"
	"testing"

	"github.com/pmjail/pmjail/jail/initstage"
)

// TestMain lets the test binary serve as its own init stage, as pmjail's
// binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case initstage.Role:
			initstage.Main()
		case spawnProbeRole:
			spawnProbe()
		case spawnParentRole:
			spawnParent()
		case spawnLowFDsRole:
			spawnLowFDs()
		}
	}
	os.Exit(m.Run())
}
