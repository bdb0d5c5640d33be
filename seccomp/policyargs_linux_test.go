package seccomp_test

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/seccomp"
)

func init() {
	probes["socket_vsock"] = func() error { return closing(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0) }
	probes["socket_alg"] = func() error { return closing(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0) }
	probes["socket_netlink_audit"] = func() error {
		return closing(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)
	}
	probes["socketpair_unix"] = func() error {
		var fds [2]int32
		if err := raw6(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM, 0, uintptr(unsafe.Pointer(&fds)), 0, 0); err != nil {
			return err
		}
		unix.Close(int(fds[0]))
		unix.Close(int(fds[1]))
		return nil
	}
	probes["socketpair_vsock"] = func() error {
		var fds [2]int32
		return raw6(unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM, 0, uintptr(unsafe.Pointer(&fds)), 0, 0)
	}
	probes["prctl_pdeathsig_clear"] = func() error { return raw(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, 0, 0) }
	probes["prctl_set_name"] = func() error {
		name, _ := unix.BytePtrFromString("probe")
		return raw(unix.SYS_PRCTL, unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0)
	}
	probes["prctl_set_dumpable"] = func() error { return raw(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 1, 0) }
	// prlimit64 reads only (no new limit): on its parent, which a jail's
	// guest could have lowered as pid 1's; on itself, as glibc calls it.
	probes["prlimit_parent"] = func() error {
		var old unix.Rlimit
		return raw6(unix.SYS_PRLIMIT64, uintptr(unix.Getppid()), unix.RLIMIT_CPU, 0, uintptr(unsafe.Pointer(&old)), 0, 0)
	}
	probes["prlimit_self"] = func() error {
		var old unix.Rlimit
		return raw6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CPU, 0, uintptr(unsafe.Pointer(&old)), 0, 0)
	}
}

// TestBuiltinsFilterArguments: every built-in policy lets through only the
// socket families and prctl options its runtime needs, and prlimit64 on
// the caller alone.
func TestBuiltinsFilterArguments(t *testing.T) {
	testenv.RequireRoot(t)
	want := map[string]string{
		"socket_vsock": "EPERM", "socket_alg": "EPERM", "socket_netlink_audit": "EPERM",
		"socketpair_vsock": "EPERM", "socketpair_unix": "ok",
		"prctl_pdeathsig_clear": "EPERM", "prctl_set_dumpable": "EPERM", "prctl_set_name": "ok",
		"prlimit_parent": "EPERM", "prlimit_self": "ok",
	}
	var names []string
	for name := range want {
		names = append(names, name)
	}
	for _, profile := range []string{"deno", "pyodide", "native"} {
		t.Run(profile, func(t *testing.T) {
			p := builtin(t, profile)
			got, counts := runProbes(t, compile(t, p, seccomp.Options{Notify: true}), names...)
			for name, w := range want {
				if got[name] != w {
					t.Errorf("%s: %q, want %q", name, got[name], w)
				}
			}
			if counts["socket"] != 3 || counts["socketpair"] != 1 || counts["prctl"] != 2 || counts["prlimit64"] != 1 {
				t.Errorf("denials %v, want socket: 3, socketpair: 1, prctl: 2, prlimit64: 1", counts)
			}
		})
	}
}
