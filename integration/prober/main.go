// Command prober is the security suite's native attacker: run inside the
// jail by `pmjail exec`, it attempts each named probe and prints one JSON
// line per probe saying whether the call succeeded and, if not, its errno.
//
// Every probe is harmless if the jail fails: paths do not exist, magic
// numbers are invalid, signals go to processes the test started, and the
// prober refuses to run at all unless its hostname is "pmjail".
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// exitNotJailed is the distinctive exit code of a prober that finds
// itself outside the jail.
const exitNotJailed = 93

// target is a path that exists nowhere, so a probe that slips past the
// jail still changes nothing.
const target = "/nonexistent-pmjail-target"

// report is one probe's outcome.
type report struct {
	Probe  string `json:"probe"`
	OK     bool   `json:"ok"`
	Errno  string `json:"errno,omitempty"`
	Detail any    `json:"detail,omitempty"`
}

type probe func(args []string) report

var probes = map[string]probe{}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(child(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "outlive" {
		os.Exit(outlive())
	}
	if len(os.Args) == 3 && os.Args[1] == "hold" {
		os.Exit(hold(os.Args[2]))
	}
	if len(os.Args) == 4 && os.Args[1] == "squat-leases" {
		slots, _ := strconv.Atoi(os.Args[3])
		os.Exit(squatLeases(os.Args[2], slots))
	}
	host, err := os.Hostname()
	if err != nil || host != "pmjail" {
		fmt.Fprintf(os.Stderr, "prober: hostname %q: not jailed, refusing to run\n", host)
		os.Exit(exitNotJailed)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, spec := range os.Args[1:] {
		// A probe may take arguments: name=arg1,arg2.
		name, arg, _ := strings.Cut(spec, "=")
		var args []string
		if arg != "" {
			args = strings.Split(arg, ",")
		}
		p, ok := probes[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "prober: unknown probe %q\n", name)
			os.Exit(2)
		}
		r := p(args)
		r.Probe = spec
		_ = enc.Encode(r)
	}
}

// result turns a syscall's error into a report.
func result(err error) report {
	if err == nil {
		return report{OK: true}
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return report{Errno: unix.ErrnoName(en)}
	}
	return report{Errno: "other", Detail: err.Error()}
}

func rawResult(r1 uintptr, en syscall.Errno) report {
	if en != 0 {
		return report{Errno: unix.ErrnoName(en), Detail: r1}
	}
	return report{OK: true, Detail: r1}
}

func sys(nr uintptr, a ...uintptr) report {
	var v [6]uintptr
	copy(v[:], a)
	r1, _, en := unix.Syscall6(nr, v[0], v[1], v[2], v[3], v[4], v[5])
	return rawResult(r1, en)
}

func ptr[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }

func cstr(s string) uintptr {
	b, _ := unix.BytePtrFromString(s)
	return uintptr(unsafe.Pointer(b))
}

func init() {
	// --- identity and posture ---
	probes["identity"] = func([]string) report {
		status, _ := os.ReadFile("/proc/self/status")
		fields := map[string]string{}
		for _, line := range strings.Split(string(status), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		host, _ := os.Hostname()
		return report{OK: true, Detail: map[string]any{
			"uid": os.Getuid(), "euid": os.Geteuid(), "gid": os.Getgid(),
			// Real, effective, saved and file system ids; supplementary groups.
			"uids": strings.Fields(fields["Uid"]), "gids": strings.Fields(fields["Gid"]), "groups": fields["Groups"],
			"cap_eff": fields["CapEff"], "cap_prm": fields["CapPrm"], "cap_inh": fields["CapInh"], "cap_bnd": fields["CapBnd"],
			"cap_amb": fields["CapAmb"], "no_new_privs": fields["NoNewPrivs"], "seccomp": fields["Seccomp"],
			"hostname": host, "pid": os.Getpid(),
		}}
	}
	probes["env"] = func([]string) report { return report{OK: true, Detail: os.Environ()} }
	probes["proc_pids"] = func([]string) report {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return result(err)
		}
		var pids []int
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, n)
			}
		}
		return report{OK: true, Detail: pids}
	}
	probes["net_interfaces"] = func([]string) report {
		// Through netlink (RTM_GETLINK), which needs no sysfs.
		tab, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
		if err != nil {
			return result(err)
		}
		msgs, err := syscall.ParseNetlinkMessage(tab)
		if err != nil {
			return result(err)
		}
		var names []string
		for _, m := range msgs {
			if m.Header.Type != unix.RTM_NEWLINK {
				continue
			}
			attrs, err := syscall.ParseNetlinkRouteAttr(&m)
			if err != nil {
				continue
			}
			for _, a := range attrs {
				if a.Attr.Type == unix.IFLA_IFNAME {
					names = append(names, strings.TrimRight(string(a.Value), "\x00"))
				}
			}
		}
		return report{OK: true, Detail: names}
	}
	probes["proc_net_dev"] = func([]string) report {
		b, err := os.ReadFile("/proc/self/net/dev")
		if err != nil {
			return result(err)
		}
		var names []string
		for _, line := range strings.Split(string(b), "\n") {
			if k, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(k, "|") {
				names = append(names, strings.TrimSpace(k))
			}
		}
		return report{OK: true, Detail: names}
	}

	// --- filesystem ---
	probes["read"] = func(a []string) report {
		b, err := os.ReadFile(a[0])
		if err != nil {
			return result(unwrap(err))
		}
		return report{OK: true, Detail: len(b)}
	}
	probes["list"] = func(a []string) report {
		ents, err := os.ReadDir(a[0])
		if err != nil {
			return result(unwrap(err))
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return report{OK: true, Detail: names}
	}
	probes["create"] = func(a []string) report {
		f, err := os.OpenFile(a[0], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return result(unwrap(err))
		}
		f.Close()
		return report{OK: true}
	}
	probes["write"] = func(a []string) report {
		// An existing file, opened for writing without creating anything.
		fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	}
	probes["mkdir"] = func(a []string) report { return result(unwrap(os.Mkdir(a[0], 0o700))) }
	probes["symlink"] = func(a []string) report { return result(unwrap(os.Symlink(a[0], a[1]))) }
	probes["fill_tmp"] = func([]string) report {
		// Files of 4 MiB each (below any file-size rlimit) until the
		// size-capped /tmp is full; stop at 1 GiB whatever happens.
		buf := make([]byte, 1<<20)
		total := 0
		for i := 0; total < 1<<30; i++ {
			f, err := os.Create(fmt.Sprintf("/tmp/fill-%d", i))
			if err != nil {
				r := result(unwrap(err))
				r.Detail = total
				return r
			}
			for j := 0; j < 4; j++ {
				n, err := f.Write(buf)
				total += n
				if err != nil {
					f.Close()
					r := result(unwrap(err))
					r.Detail = total
					return r
				}
			}
			f.Close()
		}
		return report{OK: true, Detail: total}
	}
	probes["mknod"] = func([]string) report {
		return result(unix.Mknod("/tmp/pmjail-probe-null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	}
	probes["exec_tmp"] = func([]string) report {
		// /tmp is noexec: copy ourselves there and try to run the copy.
		self, err := os.ReadFile("/proc/self/exe")
		if err != nil {
			return result(unwrap(err))
		}
		if err := os.WriteFile("/tmp/probe-copy", self, 0o755); err != nil {
			return result(unwrap(err))
		}
		return result(unwrap(unix.Exec("/tmp/probe-copy", []string{"probe-copy", "child", "exit0"}, nil)))
	}

	// --- kernel surface (each denied by seccomp, EPERM) ---
	probes["ptrace_traceme"] = func([]string) report { return sys(unix.SYS_PTRACE, unix.PTRACE_TRACEME) }
	probes["ptrace_attach"] = func(a []string) report {
		pid, _ := strconv.Atoi(a[0])
		return sys(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid))
	}
	probes["mount"] = func([]string) report {
		return result(unix.Mount("none", target, "tmpfs", 0, ""))
	}
	probes["umount2"] = func([]string) report { return result(unix.Unmount(target, unix.MNT_DETACH)) }
	probes["unshare_user"] = func([]string) report { return result(unix.Unshare(unix.CLONE_NEWUSER)) }
	probes["unshare_net"] = func([]string) report { return result(unix.Unshare(unix.CLONE_NEWNET)) }
	probes["unshare_ns"] = func([]string) report { return result(unix.Unshare(unix.CLONE_NEWNS)) }
	probes["clone_newuser"] = func([]string) report { return cloneChild(syscall.CLONE_NEWUSER) }
	probes["clone_newns"] = func([]string) report { return cloneChild(syscall.CLONE_NEWNS) }
	probes["clone_newnet"] = func([]string) report { return cloneChild(syscall.CLONE_NEWNET) }
	probes["setns"] = func([]string) report {
		fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		return result(unix.Setns(fd, unix.CLONE_NEWNET))
	}
	probes["keyctl"] = func([]string) report {
		return sys(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd) /* session keyring */, 0)
	}
	probes["add_key"] = func([]string) report {
		payload := []byte("x")
		return sys(unix.SYS_ADD_KEY, cstr("user"), cstr("pmjail-probe"), ptr(&payload[0]), 1, uintptr(0xfffffffe) /* process keyring */)
	}
	probes["request_key"] = func([]string) report {
		return sys(unix.SYS_REQUEST_KEY, cstr("user"), cstr("pmjail-probe"), 0, 0)
	}
	probes["bpf"] = func([]string) report {
		var attr [128]byte
		return sys(unix.SYS_BPF, unix.BPF_MAP_CREATE, ptr(&attr), uintptr(len(attr)))
	}
	probes["perf_event_open"] = func([]string) report {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
		attr.Size = uint32(unsafe.Sizeof(attr))
		return sys(unix.SYS_PERF_EVENT_OPEN, ptr(&attr), 0, ^uintptr(0), ^uintptr(0), 0)
	}
	probes["userfaultfd"] = func([]string) report { return sys(unix.SYS_USERFAULTFD, 0) }
	probes["io_uring_setup"] = func([]string) report {
		var params [120]byte
		return sys(unix.SYS_IO_URING_SETUP, 1, ptr(&params))
	}
	probes["personality"] = func([]string) report { return sys(unix.SYS_PERSONALITY, 0x0008 /* PER_LINUX32 */) }
	// Invalid flags: even an unjailed root gets EINVAL, never an unloaded image.
	probes["kexec_load"] = func([]string) report { return sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xdead0000) }
	probes["init_module"] = func([]string) report { return sys(unix.SYS_INIT_MODULE, 0, 0, cstr("")) }
	probes["finit_module"] = func([]string) report { return sys(unix.SYS_FINIT_MODULE, ^uintptr(0), cstr(""), 0) }
	probes["open_by_handle_at"] = func([]string) report {
		var h [8 + 128]byte
		*(*uint32)(unsafe.Pointer(&h[0])) = 8
		return sys(unix.SYS_OPEN_BY_HANDLE_AT, atFDCWD, ptr(&h), unix.O_RDONLY)
	}
	probes["name_to_handle_at"] = func([]string) report {
		var h [8 + 128]byte
		*(*uint32)(unsafe.Pointer(&h[0])) = 128
		var mnt int32
		return sys(unix.SYS_NAME_TO_HANDLE_AT, atFDCWD, cstr("/"), ptr(&h), ptr(&mnt), 0)
	}
	// An invalid magic number: EINVAL even for an unjailed root.
	probes["reboot"] = func([]string) report { return sys(unix.SYS_REBOOT, 0x1234, 0x5678, unix.LINUX_REBOOT_CMD_CAD_OFF) }
	probes["swapon"] = func([]string) report { return sys(unix.SYS_SWAPON, cstr(target), 0) }
	probes["syslog"] = func([]string) report { return sys(unix.SYS_SYSLOG, 10 /* SIZE_BUFFER */, 0, 0) }
	probes["acct"] = func([]string) report { return sys(unix.SYS_ACCT, cstr(target)) }
	probes["chroot"] = func([]string) report { return sys(unix.SYS_CHROOT, cstr("/tmp")) }
	probes["pivot_root"] = func([]string) report { return sys(unix.SYS_PIVOT_ROOT, cstr(target), cstr(target)) }
	probes["sethostname"] = func([]string) report { return result(unix.Sethostname([]byte("pmjail-probe"))) }
	probes["clock_settime"] = func([]string) report {
		// CLOCK_MONOTONIC cannot be set by anyone: EINVAL if the filter let it through.
		ts := unix.Timespec{Sec: 1}
		return sys(unix.SYS_CLOCK_SETTIME, unix.CLOCK_MONOTONIC, ptr(&ts))
	}
	probes["process_vm_readv"] = func([]string) report {
		var b [8]byte
		local := unix.Iovec{Base: &b[0], Len: 8}
		remote := unix.RemoteIovec{Base: uintptr(unsafe.Pointer(&b[0])), Len: 8}
		return sys(unix.SYS_PROCESS_VM_READV, 1, ptr(&local), 1, ptr(&remote), 1, 0)
	}
	probes["setuid0"] = func([]string) report { return sys(unix.SYS_SETUID, 0) }
	probes["capset"] = func([]string) report {
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		data := [2]unix.CapUserData{{Effective: 0xffffffff, Permitted: 0xffffffff}, {Effective: 0xffffffff, Permitted: 0xffffffff}}
		return sys(unix.SYS_CAPSET, ptr(&hdr), ptr(&data[0]))
	}
	probes["open_ptmx"] = func([]string) report {
		fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY, 0)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	}
	probes["tiocsti"] = func([]string) report {
		c := byte(0)
		return sys(unix.SYS_IOCTL, 0, unix.TIOCSTI, ptr(&c))
	}
	probes["shmget"] = func([]string) report { return sys(unix.SYS_SHMGET, 0 /* IPC_PRIVATE */, 4096, unix.IPC_CREAT|0o600) }
	probes["msgget"] = func([]string) report { return sys(unix.SYS_MSGGET, 0, unix.IPC_CREAT|0o600) }
	probes["semget"] = func([]string) report { return sys(unix.SYS_SEMGET, 0, 1, unix.IPC_CREAT|0o600) }
	// Per-user kernel budgets no runtime needs: POSIX message queues
	// (RLIMIT_MSGQUEUE), fanotify groups, locked memory (RLIMIT_MEMLOCK)
	// and POSIX timers (RLIMIT_SIGPENDING). A queue that does not exist,
	// without O_CREAT; a page of the prober's own.
	probes["mq_open"] = func([]string) report { return sys(unix.SYS_MQ_OPEN, cstr("pmjail-probe"), unix.O_RDONLY, 0, 0) }
	probes["fanotify_init"] = func([]string) report {
		return sys(unix.SYS_FANOTIFY_INIT, unix.FAN_CLASS_NOTIF|unix.FAN_REPORT_FID, unix.O_RDONLY)
	}
	probes["mlock"] = func([]string) report {
		page := make([]byte, os.Getpagesize())
		return sys(unix.SYS_MLOCK, ptr(&page[0]), uintptr(len(page)))
	}
	probes["timer_create"] = func([]string) report {
		var id int32
		return sys(unix.SYS_TIMER_CREATE, unix.CLOCK_MONOTONIC, 0, ptr(&id))
	}
	probes["x32_getpid"] = func([]string) report { return childProbe("x32") }
	probes["int80_getpid"] = func([]string) report { return childProbe("int80") }

	// --- processes and signals ---
	probes["kill"] = func(a []string) report {
		pid, _ := strconv.Atoi(a[0])
		sig, _ := strconv.Atoi(a[1])
		return result(unix.Kill(pid, syscall.Signal(sig)))
	}
	probes["getppid"] = func([]string) report { return report{OK: true, Detail: os.Getppid()} }

	// --- network ---
	probes["tcp_connect"] = func(a []string) report {
		port, _ := strconv.Atoi(a[0])
		return connect(unix.AF_INET, unix.SOCK_STREAM, 0, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	}
	probes["tcp6_connect"] = func(a []string) report {
		port, _ := strconv.Atoi(a[0])
		return connect(unix.AF_INET6, unix.SOCK_STREAM, 0, &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}})
	}
	probes["tcp_bind"] = func([]string) report {
		// Any address, an ephemeral port: only Landlock refuses it.
		return bind(unix.AF_INET, unix.SOCK_STREAM, &unix.SockaddrInet4{})
	}
	probes["udp_send"] = func(a []string) report {
		port, _ := strconv.Atoi(a[0])
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		return result(unix.Sendto(fd, []byte("pmjail-probe"), 0, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}))
	}
	probes["abstract_connect"] = func(a []string) report {
		return connect(unix.AF_UNIX, unix.SOCK_STREAM, 0, &unix.SockaddrUnix{Name: "@" + a[0]})
	}
	probes["raw_socket"] = func([]string) report {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	}
	probes["packet_socket"] = func([]string) report {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0x0300)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	}
	probes["lo_up"] = func([]string) report {
		// Bringing lo up needs CAP_NET_ADMIN in the netns's owner namespace.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return result(err)
		}
		ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
		return result(unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr))
	}
}

func connect(domain, typ, proto int, sa unix.Sockaddr) report {
	fd, err := unix.Socket(domain, typ, proto)
	if err != nil {
		return result(err)
	}
	defer unix.Close(fd)
	return result(unix.Connect(fd, sa))
}

func bind(domain, typ int, sa unix.Sockaddr) report {
	fd, err := unix.Socket(domain, typ, 0)
	if err != nil {
		return result(err)
	}
	defer unix.Close(fd)
	return result(unix.Bind(fd, sa))
}

func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

// cloneChild starts a copy of the prober in new namespaces; the copy only
// exits. Success means the filter let clone(2) create namespaces.
func cloneChild(flags uintptr) report {
	cmd := exec.Command("/proc/self/exe", "child", "exit0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	err := cmd.Run()
	if err == nil {
		return report{OK: true}
	}
	return result(unwrap(err))
}

// childProbe runs a probe that may kill its process (a bad-arch syscall
// meets SECCOMP_RET_KILL) in a copy of the prober and reports how the copy
// ended: its output on success, or the signal that killed it.
func childProbe(name string) report {
	out, err := exec.Command("/proc/self/exe", "child", name).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return report{Errno: "killed", Detail: ws.Signal().String()}
		}
		return report{Errno: "exit", Detail: ee.ExitCode()}
	}
	if err != nil {
		return result(unwrap(err))
	}
	var r report
	if json.Unmarshal(out, &r) != nil {
		return report{Errno: "other", Detail: string(out)}
	}
	return r
}

// child is the copy's entry point.
func child(args []string) int {
	switch args[0] {
	case "exit0":
		return 0
	case "x32":
		// getpid through the x32 ABI (syscall number | 0x40000000).
		_ = json.NewEncoder(os.Stdout).Encode(sys(0x40000000 | unix.SYS_GETPID))
	case "int80":
		r1, en := int80(20 /* i386 getpid */)
		_ = json.NewEncoder(os.Stdout).Encode(rawResult(r1, en))
	}
	return 0
}

// atFDCWD is AT_FDCWD as a raw system-call argument.
var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()
