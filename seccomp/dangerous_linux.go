//go:build cgo

package seccomp

import "golang.org/x/sys/unix"

// dangerousPlain are denied outright unless allowed by the operator: they
// reach kernel surface (namespaces, mounts, keyrings, eBPF, perf, io_uring,
// module loading, raw I/O ports) that no runtime pmjail hosts needs and that
// has a long record of privilege escalations.
var dangerousPlain = []string{
	"ptrace", "mount", "umount2", "pivot_root", "unshare", "setns",
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at", "iopl", "ioperm", "reboot", "swapon", "swapoff", "syslog",
}

// Dangerous calls filtered on their arguments rather than by name.
const (
	dangerClone       = "clone"       // denied with any CLONE_NEW* flag
	dangerClone3      = "clone3"      // ENOSYS: its flags sit in memory a filter cannot read
	dangerPersonality = "personality" // only the query and PER_LINUX
	dangerIoctl       = "ioctl"       // TIOCSTI and TIOCLINUX denied
)

// cloneNamespaceFlags are the CLONE_NEW* bits of clone(2)'s flags argument.
// CLONE_NEWTIME (0x80) is absent on purpose: in clone(2) that bit belongs to
// the exit signal, and new time namespaces come only from unshare/clone3.
var cloneNamespaceFlags = []uint64{
	unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
	unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
}

// deniedIoctls inject input into a terminal (TIOCSTI) or drive the console
// (TIOCLINUX): a classic sandbox escape through a shared tty.
var deniedIoctls = []uint64{unix.TIOCSTI, unix.TIOCLINUX}

// personalityQuery is personality(0xffffffff): it reads, never changes.
const personalityQuery = 0xffffffff

// DangerousSyscalls lists every name Options.AllowDangerous accepts.
func DangerousSyscalls() []string {
	names := append([]string(nil), dangerousPlain...)
	return append(names, dangerClone, dangerClone3, dangerPersonality, dangerIoctl)
}
