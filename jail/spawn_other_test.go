//go:build !(linux && amd64 && cgo)

package jail

import (
	"fmt"
	"os"
)

// Without the clone3 start (other architectures, builds without cgo) no
// test starts the spawn roles; a binary asked to play one says so.
func spawnProbe()  { notThisBuild(spawnProbeRole) }
func spawnParent() { notThisBuild(spawnParentRole) }
func spawnLowFDs() { notThisBuild(spawnLowFDsRole) }

func notThisBuild(role string) {
	fmt.Fprintf(os.Stderr, "%s: this build has no clone3 start\n", role)
	os.Exit(2)
}
