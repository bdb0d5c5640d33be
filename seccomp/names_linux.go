package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The OCI names Compile understands. They live here, with the compiler, so
// that what a profile may say (profiles.ValidateSeccomp) and what compiles
// cannot drift apart.

// nativeArch is the one architecture a policy may name: pmjail filters only
// the native entry point and refuses every other (x32, i386) outright.
var nativeArch = map[string]specs.Arch{
	"amd64": specs.ArchX86_64,
	"arm64": specs.ArchAARCH64,
}[runtime.GOARCH]

// NativeArch is the only architecture a policy may list.
func NativeArch() specs.Arch { return nativeArch }

// supportedActions are the OCI actions Compile supports. compile_linux.go
// maps each to libseccomp's (TestNamesMatchCompiler keeps the two equal).
var supportedActions = []specs.LinuxSeccompAction{
	specs.ActAllow, specs.ActLog, specs.ActErrno, specs.ActKill,
	specs.ActKillThread, specs.ActKillProcess, specs.ActTrap,
}

// refusedActions are known to the spec but not supported, with why.
var refusedActions = map[specs.LinuxSeccompAction]string{
	specs.ActTrace:  "not supported: a jailed run has no tracer",
	specs.ActNotify: "not supported in a profile: the operator turns notification on for all denials",
}

// CheckAction says why Compile would refuse a as a profile's action, or
// returns nil if it accepts it.
func CheckAction(a specs.LinuxSeccompAction) error {
	if a == "" {
		return errors.New("missing")
	}
	if why, ok := refusedActions[a]; ok {
		return fmt.Errorf("action %q %s", a, why)
	}
	if !slices.Contains(supportedActions, a) {
		return fmt.Errorf("unknown action %q", a)
	}
	return nil
}

// operators are the argument comparisons Compile supports (compareOps in
// compile_linux.go maps each to libseccomp's).
var operators = []specs.LinuxSeccompOperator{
	specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
	specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual,
}

// KnownOperator says whether Compile accepts op in an argument check.
func KnownOperator(op specs.LinuxSeccompOperator) bool {
	return slices.Contains(operators, op)
}

var flagBits = map[specs.LinuxSeccompFlag]uint32{
	specs.LinuxSeccompFlagLog:              unix.SECCOMP_FILTER_FLAG_LOG,
	specs.LinuxSeccompFlagSpecAllow:        unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW,
	specs.LinuxSeccompFlagWaitKillableRecv: unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
}

// KnownFlag says whether Compile accepts f among a policy's flags.
func KnownFlag(f specs.LinuxSeccompFlag) bool {
	_, ok := flagBits[f]
	return ok
}
