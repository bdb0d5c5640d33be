package jail

import (
	"os"
	"testing"

	"github.com/pmjail/pmjail/jail/initstage"
)

// TestMain lets the test binary serve as its own init stage, as pmjail's
// binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == initstage.Role {
		initstage.Main()
	}
	os.Exit(m.Run())
}
