package jail

import (
	"errors"
	"testing"
)

// TestInitStageFallback: without a matching pmjail-init the running binary
// is its own init stage, and says why (package sibling tests the choice).
func TestInitStageFallback(t *testing.T) {
	if s := initStage("/opt/pmjail-init", nil); s.Self || s.Path != "/opt/pmjail-init" {
		t.Errorf("matching pmjail-init not chosen: %+v", s)
	}
	if s := initStage("", errors.New("from another build")); !s.Self || s.Path != "/proc/self/exe" || s.Reason != "from another build" {
		t.Errorf("fallback: %+v", s)
	}
}
