//go:build linux && amd64

// Package int80 makes one i386 system call (getpid, through int $0x80)
// from a 64-bit process, so tests can check that a seccomp filter refuses
// the 32-bit entry point. getpid changes nothing if the filter fails.
package int80

// Getpid calls i386 getpid (nr 20) with int $0x80 and returns eax as the
// kernel left it: the pid, or a negated errno.
func Getpid() int32
