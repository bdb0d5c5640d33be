package initstage

import (
	"fmt"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// applyLandlock adds Landlock behind the mount namespace: the root is
// readable, only the writable mounts (and rwFiles) are writable, TCP binds and
// connects are refused, and abstract Unix sockets and signals are scoped to
// the job. It returns the ABI enforced (0 for none) and why, if none.
func applyLandlock(mounts []specs.Mount, rwFiles []string) (int, string) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return 0, fmt.Sprintf("landlock unavailable: %v", err)
	}
	var rwDirs []string
	for _, m := range mounts {
		if readOnly(m.Options) || m.Type == "proc" {
			continue
		}
		if m.Type == "bind" && strings.HasPrefix(m.Destination, "/dev/") {
			rwFiles = append(rwFiles, m.Destination)
		} else {
			rwDirs = append(rwDirs, m.Destination)
		}
	}
	rules := []landlock.Rule{landlock.RODirs("/"), landlock.RWDirs(rwDirs...), landlock.RWFiles(rwFiles...)}
	if err := landlock.V11.BestEffort().Restrict(rules...); err != nil {
		return 0, fmt.Sprintf("landlock restrict: %v", err)
	}
	return abi, ""
}

func readOnly(opts []string) bool {
	for _, o := range opts {
		if o == "ro" {
			return true
		}
	}
	return false
}
