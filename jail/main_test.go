package jail

import (
	"os"
	"testing"

	"github.com/pmjail/pmjail/jail/initstage"
)

// The test binary's roles for spawnShared's tests (the clone3 start, built
// on linux/amd64 with cgo only): the child it starts (spawnProbe), and a
// parent whose fds 3 and 4 the test chose (spawnParent).
const (
	spawnProbeRole  = "__spawn_probe"
	spawnParentRole = "__spawn_parent"
	spawnLowFDsRole = "__spawn_low_fds"
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
