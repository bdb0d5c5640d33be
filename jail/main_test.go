package jail

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as its own init stage, as pmjail's
// binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == InitRole {
		Init()
	}
	os.Exit(m.Run())
}
