package spawn

import (
	"os"
	"testing"
)

// The test binary's roles, started by the tests as children: the child
// they check (probe), a parent whose fds 3 and 4 the test chose (parent),
// a process whose own fds 0 to 2 are closed (lowFDs) and one that is
// refused clone3 (noClone3).
const (
	probeRole    = "__spawn_probe"
	parentRole   = "__spawn_parent"
	lowFDsRole   = "__spawn_low_fds"
	noClone3Role = "__spawn_no_clone3"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case probeRole:
			probe()
		case parentRole:
			parent()
		case lowFDsRole:
			lowFDs()
		case noClone3Role:
			refusedClone3()
		}
	}
	os.Exit(m.Run())
}
