package initstage

import (
	"testing"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// From ABI 9 the ruleset handles connecting to pathname Unix sockets and no
// rule grants it: a socket made outside the job, a host service's under an
// exec's bind, cannot be reached even if it appears after set-up.
func TestLandlockHandlesUnixConnectFromABI9(t *testing.T) {
	for v := 9; v <= len(landlockABIs); v++ {
		if uint64(landlockABIs[v-1].HandledAccessFS)&llsys.AccessFSResolveUnix == 0 {
			t.Errorf("ABI %d: the ruleset does not handle connecting to Unix sockets", v)
		}
	}
	for name, granted := range map[string]uint64{"read": llRead, "read-write": llReadWrite, "read-write dirs": llRWDirs, "read-write files": llRWFiles} {
		if granted&llsys.AccessFSResolveUnix != 0 {
			t.Errorf("the %s rule grants connecting to Unix sockets", name)
		}
	}
}
