//go:build !cgo

package posture

import (
	"errors"
	"testing"

	"github.com/pmjail/pmjail/seccomp"
)

// TestNoCompilerNoFilter: without cgo the probe has no filter to install,
// and says why, so the seccomp layer is reported missing.
func TestNoCompilerNoFilter(t *testing.T) {
	filter, err := nativeFilter()
	if filter != nil || !errors.Is(err, seccomp.ErrNoCompiler) {
		t.Fatalf("nativeFilter without cgo: %d bytes, %v; want ErrNoCompiler", len(filter), err)
	}
}
