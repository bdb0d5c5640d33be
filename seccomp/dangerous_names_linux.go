package seccomp

// The dangerous calls' names are known without cgo: the daemon's metrics
// name a denied call only if it is one of them (a bounded label set), and
// that daemon may be built without libseccomp.

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

// DangerousSyscalls lists every name Options.AllowDangerous accepts.
func DangerousSyscalls() []string {
	names := append([]string(nil), dangerousPlain...)
	return append(names, dangerClone, dangerClone3, dangerPersonality, dangerIoctl)
}
