//go:build cgo

package seccomp

import (
	"maps"
	"slices"
	"testing"
)

// TestNamesMatchCompiler: what a profile may say (names_linux.go, which
// builds without cgo) is exactly what the compiler maps to libseccomp.
func TestNamesMatchCompiler(t *testing.T) {
	if got, want := slices.Sorted(maps.Keys(actions)), slices.Sorted(slices.Values(supportedActions)); !slices.Equal(got, want) {
		t.Errorf("compiler's actions %v, supported actions %v", got, want)
	}
	if got, want := slices.Sorted(maps.Keys(compareOps)), slices.Sorted(slices.Values(operators)); !slices.Equal(got, want) {
		t.Errorf("compiler's operators %v, supported operators %v", got, want)
	}
}
