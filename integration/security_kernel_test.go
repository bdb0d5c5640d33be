package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// seccompDenied are calls every profile refuses: the guest must see EPERM,
// and the filter must be what refused, by the syscall's name in the
// result's denied_syscalls. Without the name, about half of them would
// pass with no filter at all: the guest has no capabilities anyway.
var seccompDenied = []struct{ probe, syscall string }{
	{"ptrace_traceme", "ptrace"}, {"ptrace_attach=1", "ptrace"}, {"mount", "mount"}, {"umount2", "umount2"},
	{"unshare_user", "unshare"}, {"unshare_net", "unshare"}, {"unshare_ns", "unshare"}, {"setns", "setns"},
	{"keyctl", "keyctl"}, {"add_key", "add_key"}, {"request_key", "request_key"}, {"bpf", "bpf"},
	{"perf_event_open", "perf_event_open"}, {"userfaultfd", "userfaultfd"}, {"io_uring_setup", "io_uring_setup"},
	{"personality", "personality"}, {"iopl", "iopl"}, {"ioperm", "ioperm"}, {"kexec_load", "kexec_load"},
	{"init_module", "init_module"}, {"finit_module", "finit_module"}, {"open_by_handle_at", "open_by_handle_at"},
	{"name_to_handle_at", "name_to_handle_at"}, {"reboot", "reboot"}, {"swapon", "swapon"}, {"syslog", "syslog"},
	{"acct", "acct"}, {"chroot", "chroot"}, {"pivot_root", "pivot_root"}, {"sethostname", "sethostname"},
	{"clock_settime", "clock_settime"}, {"process_vm_readv", "process_vm_readv"}, {"setuid0", "setuid"},
	{"capset", "capset"}, {"shmget", "shmget"}, {"msgget", "msgget"}, {"semget", "semget"}, {"mknod", "mknodat"},
	{"mq_open", "mq_open"}, {"fanotify_init", "fanotify_init"}, {"mlock", "mlock"}, {"timer_create", "timer_create"},
	// A foreign architecture's entry point is refused by the filter's
	// architecture check, never notified (its number would be
	// misnamed): it has no name to count.
	{"x32_getpid", ""}, {"int80_getpid", ""},
}

func TestSecurityKernel_ProberSyscalls(t *testing.T) {
	bin := buildProber(t)
	shmBefore := snapshotHost(t).shm
	var probes []string
	for _, d := range seccompDenied {
		probes = append(probes, d.probe)
	}
	probes = append(probes, "open_ptmx", "tiocsti")
	r, rep := runProber(t, bin, nil, probes...)
	for _, d := range seccompDenied {
		wantErrno(t, rep, d.probe, "EPERM")
		if d.syscall != "" && r.Denied[d.syscall] == 0 {
			t.Errorf("probe %s: denied_syscalls %v does not name %s: the filter did not refuse it", d.probe, r.Denied, d.syscall)
		}
	}
	wantErrno(t, rep, "open_ptmx", "ENOENT")
	wantErrno(t, rep, "tiocsti", "EPERM", "ENOTTY")
	if r.Status != "ok" {
		t.Errorf("status %s exit %d stderr %q", r.Status, r.ExitCode, r.Stderr)
	}
	if n := newItems(shmBefore, snapshotHost(t).shm); len(n) > 0 {
		t.Errorf("SysV segments appeared on the host: %q", n)
	}
}

// Namespace flags through clone(2) itself (allowed for threads and forks):
// the filter must refuse the namespace flags, not only unshare(2).
func TestSecurityKernel_CloneNamespaces(t *testing.T) {
	bin := buildProber(t)
	probes := []string{"clone_newuser", "clone_newns", "clone_newnet"}
	r, rep := runProber(t, bin, nil, probes...)
	for _, p := range probes {
		wantErrno(t, rep, p, "EPERM")
	}
	// The filter, not a missing capability, refused each one.
	if r.Denied["clone"] < uint64(len(probes)) {
		t.Errorf("denied_syscalls %v names clone %d times, want %d (one per probe)", r.Denied, r.Denied["clone"], len(probes))
	}
}

func TestSecurityKernel_Posture(t *testing.T) {
	bin := buildProber(t)
	r, rep := runProber(t, bin, nil, "identity", "env", "proc_pids", "net_interfaces", "proc_net_dev",
		"create=/pmjail-probe", "exec_tmp", "lo_up")
	var id struct {
		UID, EUID, GID int
		UIDs           []string `json:"uids"`
		GIDs           []string `json:"gids"`
		Groups         string   `json:"groups"`
		CapEff         string   `json:"cap_eff"`
		CapPrm         string   `json:"cap_prm"`
		CapInh         string   `json:"cap_inh"`
		CapBnd         string   `json:"cap_bnd"`
		CapAmb         string   `json:"cap_amb"`
		NoNewPrivs     string   `json:"no_new_privs"`
		Seccomp        string
		Hostname       string
	}
	const noCaps = "0000000000000000"
	// Every id (real, effective, saved, file system) and no group of the
	// init stage's: it drops them on the thread that execs the guest.
	all1000 := []string{"1000", "1000", "1000", "1000"}
	if detail(t, rep, "identity", &id) {
		if id.UID != 1000 || id.EUID != 1000 || !slices.Equal(id.UIDs, all1000) || !slices.Equal(id.GIDs, all1000) || id.Groups != "" ||
			id.CapEff != noCaps || id.CapPrm != noCaps || id.CapInh != noCaps || id.CapBnd != noCaps ||
			id.CapAmb != noCaps || id.NoNewPrivs != "1" || id.Seccomp != "2" || id.Hostname != "pmjail" {
			t.Errorf("identity %+v", id)
		}
	}
	var env []string
	if detail(t, rep, "env", &env) {
		var keys []string
		for _, kv := range env {
			k, _, _ := strings.Cut(kv, "=")
			keys = append(keys, k)
		}
		if strings.Join(keys, ",") != "PATH,HOME,LANG" {
			t.Errorf("environment %q, want exactly PATH, HOME, LANG", env)
		}
	}
	var pids []int
	if detail(t, rep, "proc_pids", &pids) && (len(pids) > 3 || len(pids) == 0) {
		t.Errorf("/proc shows pids %v, want only the job's own", pids)
	}
	for _, p := range []string{"net_interfaces", "proc_net_dev"} {
		var ifs []string
		if detail(t, rep, p, &ifs) && strings.Join(ifs, ",") != "lo" {
			t.Errorf("%s: %v, want only lo", p, ifs)
		}
	}
	wantErrno(t, rep, "create=/pmjail-probe", "EROFS")
	wantErrno(t, rep, "exec_tmp", "EACCES")
	wantErrno(t, rep, "lo_up", "EPERM")
	// The host sees the guest under a jail uid, never root.
	if r.Status != "ok" {
		t.Errorf("status %s", r.Status)
	}
}

func TestSecurityProcess_Signals(t *testing.T) {
	bin := buildProber(t)
	victim := startVictim(t)
	self := os.Getpid()
	_, rep := runProber(t, bin, nil, "kill="+itoa(victim)+",9", "kill="+itoa(self)+",0", "kill=1,0", "getppid")
	wantErrno(t, rep, "kill="+itoa(victim)+",9", "ESRCH")
	wantErrno(t, rep, "kill="+itoa(self)+",0", "ESRCH")
	if p := rep["kill=1,0"]; !p.OK {
		t.Errorf("kill(1, 0) in the job's own pid namespace: %+v, want success (pid 1 is the job's init)", p)
	}
	var ppid int
	if detail(t, rep, "getppid", &ppid) && ppid != 1 {
		t.Errorf("getppid %d, want 1 (the jail's init stage, pid 1 of the job's namespace)", ppid)
	}
	if !alive(victim) {
		t.Errorf("the host process %d died", victim)
	}
}

// TestSecurityKernel_Landlock attacks what only Landlock refuses inside
// the jail: opening a writable file outside the writable mounts (the
// guest's own /proc/self/comm, on the read-write /proc), binding a TCP
// port, and a TCP connect (which the empty network namespace would
// otherwise fail with ENETUNREACH or EADDRNOTAVAIL). The init stage enforces the ruleset on
// the thread that execs the guest; the guest must be inside it. A run
// with Landlock off shows each probe tells the difference.
func TestSecurityKernel_Landlock(t *testing.T) {
	bin := buildProber(t)
	probes := []string{"write=/proc/self/comm", "tcp_bind", "tcp_connect=9", "tcp6_connect=9"}
	r, rep := runProber(t, bin, nil, probes...)
	var p posture
	if err := json.Unmarshal(r.Posture, &p); err != nil {
		t.Fatalf("posture: %v", err)
	}
	abi := 0
	for _, l := range p.Layers {
		if l.Name == "landlock" && l.State == "applied" {
			if _, err := fmt.Sscanf(l.Detail, "ABI %d:", &abi); err != nil {
				t.Fatalf("landlock layer detail %q: %v", l.Detail, err)
			}
		}
	}
	if abi == 0 {
		// Skip only where the host has no Landlock: a run that leaves it
		// off on a host that has it has lost the layer this test guards.
		host := pmjailCmd(t, "", "posture", "--json")
		if hp := decodePosture(t, []byte(host.Stdout)); hp.state("landlock") == "applied" {
			t.Fatalf("Landlock not applied in the run (%q) though the host has it", p.state("landlock"))
		}
		skipWithoutLandlock(t, p.state("landlock"))
	}
	wantErrno(t, rep, "write=/proc/self/comm", "EACCES")
	if abi >= 4 {
		for _, probe := range probes[1:] {
			wantErrno(t, rep, probe, "EACCES")
		}
	}

	profile := filepath.Join(outsideTmpDir(t, "itest-profile-"), "nolandlock.json")
	writeFile(t, profile, `{"name":"nolandlock","limits":{"memory":"256M","cpu_time":"10s","timeout":"30s","pids":32,"output":"1M","tmp":"16M"},`+
		`"seccomp":{"deno":"deno","python":"pyodide","native":"native"},"landlock":false}`)
	_, rep = runProber(t, bin, []string{"--profile", profile}, probes...)
	for _, probe := range probes[:2] {
		if !rep[probe].OK {
			t.Errorf("without Landlock, %s: %+v, want success (the probe tests nothing)", probe, rep[probe])
		}
	}
	for _, probe := range probes[2:] {
		wantErrno(t, rep, probe, "ENETUNREACH", "EADDRNOTAVAIL")
	}
}
