package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// checkSeccomp wants the actions a supervisor relies on (user notification
// for brokered calls, kill_process for banned ones) and a filter that really
// applies: getppid returns EPERM in a thread under a tiny hand-made filter.
func checkSeccomp() (string, error) {
	data, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		return "", fmt.Errorf("read seccomp actions: %w", err)
	}
	actions := strings.Fields(string(data))
	for _, want := range []string{"kill_process", "errno", "user_notif"} {
		if !strings.Contains(" "+string(data)+" ", " "+want+" ") {
			return "", fmt.Errorf("seccomp action %s missing from %q", want, actions)
		}
	}
	errc := make(chan error, 1)
	// The filter goes on one locked thread that is then thrown away (a
	// goroutine that exits while locked takes its thread with it).
	go func() {
		runtime.LockOSThread()
		errc <- filterGetppid()
	}()
	if err := <-errc; err != nil {
		return "", err
	}
	return fmt.Sprintf("actions %q; a filter returned EPERM for getppid", actions), nil
}

func filterGetppid() error {
	const (
		offsetNr   = 0
		offsetArch = 4
	)
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offsetArch},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, K: unix.AUDIT_ARCH_X86_64},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offsetNr},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jf: 1, K: unix.SYS_GETPPID},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", err)
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_SECCOMP)", err)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0); errno != unix.EPERM {
		return fmt.Errorf("getppid under the filter: errno %v, want EPERM", errno)
	}
	return nil
}

// checkLandlock asks the kernel for its Landlock ABI version.
func checkLandlock() (string, error) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		if errors.Is(errno, unix.EOPNOTSUPP) || errors.Is(errno, unix.ENOSYS) {
			return "", fmt.Errorf("landlock not enabled: %w", errno)
		}
		return "", os.NewSyscallError("landlock_create_ruleset", errno)
	}
	return fmt.Sprintf("ABI %d", abi), nil
}
