//go:build !cgo

package seccomp_test

import (
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/seccomp"
)

// TestNoCompilerWithoutCgo: a build without libseccomp says so, with the
// sentinel, rather than compile nothing and report success.
func TestNoCompilerWithoutCgo(t *testing.T) {
	prog, err := seccomp.Compile(&specs.LinuxSeccomp{DefaultAction: specs.ActAllow}, seccomp.Options{})
	if prog != nil || !errors.Is(err, seccomp.ErrNoCompiler) {
		t.Errorf("Compile without cgo: %v, %v; want ErrNoCompiler", prog, err)
	}
	if err := seccomp.CheckSyscall("getpid"); !errors.Is(err, seccomp.ErrNoCompiler) {
		t.Errorf("CheckSyscall without cgo: %v, want ErrNoCompiler", err)
	}
}
