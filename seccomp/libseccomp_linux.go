//go:build cgo

package seccomp

import (
	"fmt"
	"strconv"
	"sync"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// What, besides Compile, asks libseccomp (cgo). nolibseccomp_linux.go
// answers the same without it.

// CheckSyscall returns nil if name is a syscall of the native architecture
// that a profile may name, an error saying it is unknown otherwise.
func CheckSyscall(name string) error {
	if _, err := libseccomp.GetSyscallFromName(name); err != nil {
		return fmt.Errorf("unknown syscall %q", name)
	}
	return nil
}

var nativeScmpArch = sync.OnceValues(libseccomp.GetNativeArch)

// syscallName names the native syscall nr for a denial count.
func syscallName(nr int32) string {
	if arch, err := nativeScmpArch(); err == nil {
		if name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(arch); err == nil {
			return name
		}
	}
	return "syscall_" + strconv.Itoa(int(nr))
}

// libraryVersion names the libseccomp Compile uses, for the cache's key.
func libraryVersion() string {
	// libseccomp-golang queried the API level at init; this reads it back.
	api, _ := libseccomp.GetAPI()
	major, minor, micro := libseccomp.GetLibraryVersion()
	return fmt.Sprintf("%d.%d.%d api %d", major, minor, micro, api)
}
