package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The trust boundary between a job and its supervisor's lifetime: a guest
// must not outlive the supervisor that limits it (whatever it does to its
// own parent-death signal), and the host ids it runs as must stay leased
// to it until it is gone; no local user may hold those leases.

// Job id slots as the jail leases them (jail/ids_linux.go): a job's guest
// runs as host uid idBase+2*slot+1.
const (
	leaseIDBase = 1 << 30
	leaseSlots  = 1 << 14
	leaseDir    = "/run/pmjail/leases"
)

// TestTrust_LifetimeExecGuestDiesWithCLI: a native guest that clears its
// parent-death signal still ends with a SIGKILLed `pmjail exec`, its lease
// is free once it is gone, and the next run sweeps its cgroup. Two layers
// hold this, each tried alone: the policies refuse to clear the signal
// (prctl filtered by option), and where a policy lets it through, the
// job's pid 1 (pmjail's init stage, whose signal the guest cannot touch)
// still takes the guest down with it.
func TestTrust_LifetimeExecGuestDiesWithCLI(t *testing.T) {
	t.Run("default policy", func(t *testing.T) {
		guestDiesWithCLI(t, "refused", "exec", "--timeout", "60s")
	})
	t.Run("policy allowing prctl", func(t *testing.T) {
		policy := filepath.Join(t.TempDir(), "allow-all.json")
		writeFile(t, policy, `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],"syscalls":[]}`)
		args := withProfile(t, []string{"exec", "--timeout", "60s"}, `{"deno":`+jsString(policy)+`,"python":`+jsString(policy)+`,"native":`+jsString(policy)+`}`, true)
		guestDiesWithCLI(t, "cleared", args...)
	})
}

// guestDiesWithCLI runs the outliving prober under `pmjail args...`,
// requires its ready line to say want about its parent-death signal, and
// SIGKILLs the CLI.
func guestDiesWithCLI(t *testing.T, want string, args ...string) {
	prober := buildProber(t)
	before := snapshotHost(t)
	cli := exec.Command(pmjail, append(args, "--", prober, "outlive")...)
	out, err := cli.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cli.Stderr = &stderr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cli.ProcessState == nil {
			_ = cli.Process.Kill()
			_ = cli.Wait()
		}
	})
	line := readyLine(t, out, &stderr)
	if line == "" {
		t.Fatalf("the guest never said it was ready: %s", stderr.String())
	}
	if !strings.HasSuffix(line, " "+want) {
		t.Fatalf("guest: %q, want its parent-death signal %s", line, want)
	}
	sup := cli.Process.Pid
	guest := onlyOne(t, named(descendants(sup), "prober"), "prober guest")
	pidfd := openPidfd(t, guest)
	slot := leaseSlot(t, guest)
	_ = cli.Process.Kill()
	_ = cli.Wait()
	waitGone(t, pidfd, guest, "a guest that cleared its parent-death signal outlived the SIGKILLed pmjail exec")
	wantLeaseFree(t, slot)
	// Nothing but the next run removes the dead CLI's cgroup.
	if inv := pmjailCmd(t, "", "exec", "--json", "--", "/bin/true"); inv.Result == nil || inv.Result.Status != "ok" {
		t.Fatalf("next run: exit %d %s", inv.ExitCode, inv.Stderr)
	}
	if n := jobCgroups(sup); len(n) > 0 {
		t.Errorf("the next run did not sweep the dead CLI's cgroups %v", n)
	}
	assertNothingLeft(t, before)
}

// TestTrust_LifetimeDaemonGuestDiesWithDaemon: the same for a run of a
// SIGKILLed `pmjail serve`: its guest is gone, its lease free, and the
// next daemon sweeps its cgroups (prestarted init stages' included).
func TestTrust_LifetimeDaemonGuestDiesWithDaemon(t *testing.T) {
	before := snapshotHost(t)
	dir := daemonDir(t)
	// No warm runtimes: under emulation (the VM) one still starting spends
	// as much CPU as the spinning guest and cannot be told from it;
	// TestDaemonWarmKilled proves warm runtimes die with the daemon.
	d := startDaemon(t, dir, `{"version": 1, "max_concurrency": 2, "max_queue": 4, "socket": {"mode": "0660"}, "warm": {"deno": 0}}`)
	loop := filepath.Join(t.TempDir(), "loop.js")
	writeFile(t, loop, `for (;;) {}`)
	submit, _ := startPmjail(t, "submit", "--socket", d.sock, loop)
	guest := spinningGuest(t, d)
	pidfd := openPidfd(t, guest)
	slot := leaseSlot(t, guest)
	jail := descendants(d.pid())
	dead := d.pid()
	d.kill()
	_ = submit.Wait()
	waitGone(t, pidfd, guest, "the guest outlived the SIGKILLed daemon")
	if living := outliving(jail, 5*time.Second); len(living) > 0 {
		t.Fatalf("processes of the SIGKILLed daemon's jobs outlived it: %v", describePids(living))
	}
	wantLeaseFree(t, slot)
	if len(jobCgroups(dead)) == 0 {
		t.Errorf("no cgroup of the SIGKILLed daemon %d found: the sweep proves nothing", dead)
	}
	next := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 4, "0660"))
	if n := jobCgroups(dead); len(n) > 0 {
		t.Errorf("the next daemon did not sweep the dead one's cgroups %v", n)
	}
	next.stop(t)
	assertNothingLeft(t, before)
}

// TestTrust_LeaseUnprivilegedCannotBlock: an unprivileged host user who
// takes every name and file it can of the job id leases blocks no run.
// The user and the run share a network namespace of the test's own (the
// leases were once abstract sockets, which live in one), so that the
// attack, should it work, blocks no one else's runs.
func TestTrust_LeaseUnprivilegedCannotBlock(t *testing.T) {
	prober := buildProber(t)
	// Never unlocked: the thread, in its own network namespace, ends with
	// the test.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("private network namespace: %v", err)
	}
	nobody := uint32(65534)
	squat := exec.Command(prober, "squat-leases", leaseDir, strconv.Itoa(leaseSlots))
	squat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	hold, err := squat.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := squat.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	squat.Stderr = &stderr
	if err := squat.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hold.Close()
		_ = squat.Wait()
	})
	line := readyLine(t, out, &stderr)
	var bound, files int
	if _, err := fmt.Sscanf(line, "ready %d %d", &bound, &files); err != nil {
		t.Fatalf("squatter: %q: %v (%s)", line, err, stderr.String())
	}
	if files > 0 {
		t.Errorf("an unprivileged user locked %d lease files in %s", files, leaseDir)
	}
	inv := pmjailCmd(t, "", "exec", "--json", "--", "/bin/true")
	if inv.Result == nil || inv.Result.Status != "ok" {
		t.Fatalf("a run beside a user holding %d lease names and %d lease files: exit %d: %s",
			bound, files, inv.ExitCode, strings.TrimSpace(inv.Stderr))
	}
}

// readyLine reads lines from r until one starts with "ready" and returns
// it ("" at EOF or after 60s).
func readyLine(t *testing.T, r io.Reader, stderr *lockedBuffer) string {
	t.Helper()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") {
				lines <- sc.Text()
				// Keep draining, so that the writer never blocks.
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		lines <- ""
	}()
	select {
	case l := <-lines:
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("no ready line within 60s: %s", stderr.String())
		return ""
	}
}

func onlyOne(t *testing.T, pids []int, what string) int {
	t.Helper()
	if len(pids) != 1 {
		t.Fatalf("want one %s, found %v", what, describePids(pids))
	}
	return pids[0]
}

// openPidfd opens a pidfd of pid, closed at the end of the test: it waits
// for exactly that process, whatever pid is reused for later.
func openPidfd(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// waitGone waits up to 2s for the process of pidfd to exit, and fails
// with msg if it does not. The supervisor's death kills its jobs at once;
// later, any other supervisor's sweep of the dead one's cgroups would.
func waitGone(t *testing.T, pidfd, pid int, msg string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n == 1 {
			return
		}
		if err != nil {
			t.Fatalf("poll pidfd of %d: %v", pid, err)
		}
		t.Fatalf("%s: %v still runs 2s later (state %s, parent %d)", msg, describePids([]int{pid}), procState(pid), parentOf(pid))
	}
}

// leaseSlot is the job id slot whose guest uid pid runs as.
func leaseSlot(t *testing.T, pid int) int {
	t.Helper()
	uid, ok := processUID(pid)
	if !ok || !leaseGuestID(uid) {
		t.Fatalf("guest %d runs as uid %d (read %v), no job's guest id", pid, uid, ok)
	}
	return (uid - leaseIDBase - 1) / 2
}

// processUID reads pid's real uid from /proc.
func processUID(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, err := strconv.Atoi(f[1])
			return uid, err == nil
		}
	}
	return 0, false
}

// leaseGuestID reports whether uid is a job's guest id: the odd one of a
// lease's pair.
func leaseGuestID(uid int) bool {
	return uid >= leaseIDBase && uid < leaseIDBase+2*leaseSlots && uid%2 == 1
}

// spinningGuest waits for the guest of d's run of an endless loop and
// returns its pid: the one deno, under a lease's guest id, that has spent
// half a second of CPU. A deno the daemon runs for itself (the caches it
// builds at start) runs under no lease's id; its warm runtimes do, but
// wait for a job after a start of a few clock ticks.
func spinningGuest(t *testing.T, d *daemon) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var spinning []int
		for _, p := range slices.DeleteFunc(named(descendants(d.pid()), "deno"), notLeased) {
			if self, _, err := cpuTicks(p); err == nil && self >= clockTicks/2 {
				spinning = append(spinning, p)
			}
		}
		if len(spinning) > 0 {
			return onlyOne(t, spinning, "spinning deno guest")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon started no spinning deno guest within 60s: %s", d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// notLeased reports whether pid runs under no job's guest id.
func notLeased(pid int) bool {
	uid, ok := processUID(pid)
	return !ok || !leaseGuestID(uid)
}

// wantLeaseFree checks that nothing holds slot's lease file locked (a
// slot never leased has none).
func wantLeaseFree(t *testing.T, slot int) {
	t.Helper()
	fd, err := unix.Open(filepath.Join(leaseDir, strconv.Itoa(slot)), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return
	}
	if err != nil {
		t.Fatalf("lease of slot %d: %v", slot, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Errorf("the lease of slot %d is still held once its job is gone: %v", slot, err)
	}
}

// TestTrust_LifetimeSignalsToPid1: guest → host. The guest runs as its
// pid 1's ids and may signal it; no catchable signal may end pid 1 (and
// with it the job, reported as pmjail's own exit 2). Every kill succeeds,
// the guest goes on and the run ends as the guest ended it.
func TestTrust_LifetimeSignalsToPid1(t *testing.T) {
	bin := buildProber(t)
	var probes []string
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGABRT,
		syscall.SIGILL, syscall.SIGTRAP, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGSYS, syscall.SIGSTKFLT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGXCPU, syscall.SIGVTALRM, syscall.SIGPWR} {
		probes = append(probes, fmt.Sprintf("kill=1,%d", sig))
	}
	r, rep := runProber(t, bin, nil, append(probes, "getppid")...)
	for _, p := range append(probes, "getppid") {
		if got, ok := rep[p]; !ok || !got.OK {
			t.Errorf("probe %s: %+v (reported %v), want it run and successful", p, got, ok)
		}
	}
	if r.Status != "ok" || r.ExitCode != 0 {
		t.Errorf("status %s exit %d stderr %q: the signals to pid 1 ended the job", r.Status, r.ExitCode, r.Stderr)
	}
}

// TestTrust_LifetimePid1RlimitsOutOfReach: guest → host. The guest runs
// as its pid 1's ids, which let it set pid 1's rlimits with prlimit64:
// lowering pid 1's RLIMIT_CPU to a second and signalling pid 1 until it
// had spent it had the kernel kill pid 1, and the job with it ("killed by
// SIGKILL"), by no signal of the guest's. The policies allow prlimit64 on
// the caller alone (pid 0, as glibc and Go call it). The probe reads pid
// 1's limit and writes the same value back: nothing changes, jailed or
// not.
func TestTrust_LifetimePid1RlimitsOutOfReach(t *testing.T) {
	bin := buildProber(t)
	r, rep := runProber(t, bin, nil, "prlimit=1", "prlimit=0")
	wantErrno(t, rep, "prlimit=1", "EPERM")
	if got := rep["prlimit=0"]; !got.OK {
		t.Errorf("probe prlimit=0 (its own): errno %s, want success", got.Errno)
	}
	if r.Denied["prlimit64"] != 1 {
		t.Errorf("denied_syscalls %v, want prlimit64: 1", r.Denied)
	}
}

// TestTrust_LifetimePid1HoldsNothing: guest → host. The job's pid 1 stays
// for the whole run, so every one of its threads, not only the one that
// started the guest, must hold no capability. (Its other threads keep the
// namespace's root ids, unprivileged on the host: given the guest's uid
// they would count against the guest's RLIMIT_NPROC.)
func TestTrust_LifetimePid1HoldsNothing(t *testing.T) {
	bin := buildProber(t)
	_, rep := runProber(t, bin, nil, "pid1_creds")
	var threads []string
	if !detail(t, rep, "pid1_creds", &threads) {
		t.Fatalf("pid1_creds: %+v", rep["pid1_creds"])
	}
	if len(threads) < 2 {
		t.Fatalf("pid 1 has %d threads: %q; a Go init stage has several", len(threads), threads)
	}
	for _, th := range threads {
		if !strings.Contains(th, "CapEff=0000000000000000") || !strings.Contains(th, "CapPrm=0000000000000000") {
			t.Errorf("a thread of pid 1 holds capabilities:\n%s", strings.Join(threads, "\n"))
			break
		}
	}
}

// TestTrust_LifetimeGuestKeepsItsCPUs: the init stage holds its threads on
// one core while it drops their capabilities (a faster drop on a busy
// host); the guest it starts runs on every CPU its supervisor may.
func TestTrust_LifetimeGuestKeepsItsCPUs(t *testing.T) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == "Cpus_allowed_list" {
			want = strings.TrimSpace(v)
		}
	}
	bin := buildProber(t)
	_, rep := runProber(t, bin, nil, "cpus")
	var got string
	if !detail(t, rep, "cpus", &got) {
		t.Fatalf("cpus: %+v", rep["cpus"])
	}
	if got != want {
		t.Errorf("the guest runs on CPUs %q, its supervisor on %q", got, want)
	}
}
