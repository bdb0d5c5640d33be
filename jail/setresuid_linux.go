//go:build !386 && !arm

package jail

import "golang.org/x/sys/unix"

// sysSetresuid is setresuid(2) with 32-bit ids. On 386 and arm this number
// is the call with 16-bit ids (Go's syscall package uses SETRESUID32
// there): the package is left undefined on those rather than wrong, as
// the init stage's (initstage.sysSetresuid).
const sysSetresuid = unix.SYS_SETRESUID
