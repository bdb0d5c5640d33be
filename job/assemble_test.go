package job

import (
	"testing"

	"github.com/pmjail/pmjail/ipc"
)

// A guest's cause chain reaches the result, cut after maxCauses links
// whatever the guest sent.
func TestGuestErrorCausesBounded(t *testing.T) {
	g := &ipc.GuestError{Name: "E0", Message: "0"}
	for i, e := 1, g; i < 20; i++ {
		e.Cause = &ipc.GuestError{Name: "E", Message: "deeper"}
		e = e.Cause
	}
	links := 0
	for e := guestError(g, 0); e != nil; e = e.Cause {
		links++
	}
	if links != maxCauses+1 {
		t.Errorf("%d errors in the chain, want the error and %d causes", links, maxCauses)
	}
}
