//go:build !cgo

package seccomp

import (
	"fmt"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/seccomp/bpf"
)

// A build without cgo links no libseccomp: it compiles no filter, and says
// so with ErrNoCompiler wherever the answer needed libseccomp.

// Compile returns ErrNoCompiler: without libseccomp there is no compiler.
func Compile(p *specs.LinuxSeccomp, opt Options) (*bpf.Program, error) {
	return nil, ErrNoCompiler
}

// CheckSyscall returns ErrNoCompiler: the syscall table is libseccomp's.
func CheckSyscall(name string) error {
	return fmt.Errorf("check syscall %q: %w", name, ErrNoCompiler)
}

// syscallName numbers the syscall nr: naming it needs libseccomp.
func syscallName(nr int32) string {
	return "syscall_" + strconv.Itoa(int(nr))
}

// libraryVersion is "none": no cached program of a build with libseccomp
// matches this build's key.
func libraryVersion() string { return "none" }
