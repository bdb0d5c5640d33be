package main

import "syscall"

func int80raw(nr uintptr) uintptr

// int80 makes an i386 system call and splits its result like the kernel's
// convention: -4095..-1 are errnos.
func int80(nr uintptr) (uintptr, syscall.Errno) {
	r := int32(int80raw(nr))
	if r < 0 && r > -4096 {
		return 0, syscall.Errno(-r)
	}
	return uintptr(r), 0
}
