//go:build !386 && !arm

package initstage

import "golang.org/x/sys/unix"

// The credential system calls threadSyscall makes. On 386 and arm these
// numbers are the calls with 16-bit ids (Go's syscall package uses the
// ...32 ones there): the package is left undefined on those rather than
// wrong.
const (
	sysSetgroups = unix.SYS_SETGROUPS
	sysSetresgid = unix.SYS_SETRESGID
	sysSetresuid = unix.SYS_SETRESUID
)
