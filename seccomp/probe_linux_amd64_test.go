package seccomp_test

import (
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/seccomp/internal/int80"
)

func init() {
	probes["iopl"] = func() error { return raw(unix.SYS_IOPL, 0, 0, 0) }
	// x32 numbers and the 32-bit entry point exist on amd64 alone.
	probes["x32_getpid"] = func() error { return raw(unix.SYS_GETPID|0x40000000, 0, 0, 0) }
	probes["i386_getpid"] = func() error {
		if r := int80.Getpid(); r < 0 {
			return unix.Errno(-r)
		}
		return nil
	}
}
