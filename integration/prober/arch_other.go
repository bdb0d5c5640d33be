//go:build !amd64

package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// floodNR: sysfs(2) exists on x86 alone; acct(2) is refused as well.
const floodNR = unix.SYS_ACCT

// int80: the i386 entry point exists on amd64 alone.
func int80(uintptr) (uintptr, syscall.Errno) { return 0, syscall.ENOSYS }
