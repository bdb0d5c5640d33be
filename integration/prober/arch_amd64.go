package main

import "golang.org/x/sys/unix"

// floodNR is the call deny_flood makes: sysfs(2), which every policy
// refuses and which changes nothing.
const floodNR = unix.SYS_SYSFS

func init() {
	// I/O port access exists on x86 alone.
	probes["iopl"] = func([]string) report { return sys(unix.SYS_IOPL, 3) }
	probes["ioperm"] = func([]string) report { return sys(unix.SYS_IOPERM, 0x80, 1, 1) }
}
