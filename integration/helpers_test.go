package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
)

// exitNotJailed is the exit code the prober and the hostile scripts use
// when they find they are not inside the jail (and so refuse to attack).
const exitNotJailed = 93

// denoBin is the Deno binary the jail runs, for `deno run -A` under exec.
func denoBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(os.Getenv("PMJAIL_RUNTIME_DIR"), "@deno", "linux-x64-glibc", "deno")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("deno binary: %v (run `make setup`)", err)
	}
	return p
}

// outsideTmpDir makes a directory that `pmjail exec --ro-bind` can bind:
// the jail mounts its own /tmp, so a bind source under /tmp has no place in
// the jail's root. It is removed when the test ends.
func outsideTmpDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// buildProber builds integration/prober statically into a fresh directory
// outside /tmp and returns the binary's path.
func buildProber(t *testing.T) string {
	t.Helper()
	// Prebuilt where there is no Go toolchain (the VM).
	if p := os.Getenv("PMJAIL_PROBER"); p != "" {
		return p
	}
	dir := outsideTmpDir(t, "itest-prober-")
	bin := filepath.Join(dir, "prober")
	cmd := exec.Command("go", "build", "-o", bin, "./integration/prober")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build prober: %v\n%s", err, out)
	}
	return bin
}

// probeReport is one line of the prober's output.
type probeReport struct {
	Probe  string          `json:"probe"`
	OK     bool            `json:"ok"`
	Errno  string          `json:"errno"`
	Detail json.RawMessage `json:"detail"`
}

// runProber runs the prober under `pmjail exec --json [flags]` with the
// given probes and returns the result and the reports by probe spec.
func runProber(t *testing.T, bin string, flags []string, probes ...string) (*Result, map[string]probeReport) {
	t.Helper()
	args := append([]string{"exec", "--json"}, flags...)
	args = append(args, "--", bin)
	args = append(args, probes...)
	inv := pmjailCmd(t, "", args...)
	if inv.Result == nil {
		t.Fatalf("pmjail %v: no result (exit %d)\nstdout: %s\nstderr: %s", args, inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	r := inv.Result
	if r.ExitCode == exitNotJailed {
		t.Fatalf("the prober found itself outside the jail: %s", r.Stderr)
	}
	reports := map[string]probeReport{}
	sc := bufio.NewScanner(strings.NewReader(r.Stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var p probeReport
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("prober line %q: %v", sc.Text(), err)
		}
		reports[p.Probe] = p
	}
	for _, p := range probes {
		if _, ok := reports[p]; !ok {
			t.Errorf("probe %s reported nothing (status %s, exit %d, stderr %q, denied %v)", p, r.Status, r.ExitCode, r.Stderr, r.Denied)
		}
	}
	return r, reports
}

// wantErrno checks that a probe failed with one of the errnos.
func wantErrno(t *testing.T, reports map[string]probeReport, probe string, errnos ...string) {
	t.Helper()
	p, ok := reports[probe]
	if !ok {
		return // already reported by runProber
	}
	if p.OK || !slices.Contains(errnos, p.Errno) {
		t.Errorf("probe %s: ok=%v errno=%q detail=%s, want failure with %v", probe, p.OK, p.Errno, p.Detail, errnos)
	}
}

// detail decodes a probe's detail into v.
func detail(t *testing.T, reports map[string]probeReport, probe string, v any) bool {
	t.Helper()
	p, ok := reports[probe]
	if !ok || !p.OK {
		t.Errorf("probe %s: %+v, want success", probe, p)
		return false
	}
	if err := json.Unmarshal(p.Detail, v); err != nil {
		t.Errorf("probe %s detail %s: %v", probe, p.Detail, err)
		return false
	}
	return true
}

// jsReport runs a hostile script's JSON report (its last stdout line).
type jsProbe struct {
	OK      bool            `json:"ok"`
	Value   json.RawMessage `json:"value"`
	Name    string          `json:"name"`
	Code    string          `json:"code"`
	Message string          `json:"message"`
}

func parseJSReport(t *testing.T, r *Result) map[string]jsProbe {
	t.Helper()
	if r.ExitCode == exitNotJailed {
		t.Fatalf("the hostile script found itself outside the jail: %s", r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var out map[string]jsProbe
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatalf("hostile script report: %v\nstatus %s exit %d error %+v\nstdout %q\nstderr %q", err, r.Status, r.ExitCode, r.Error, r.Stdout, r.Stderr)
	}
	return out
}

// wantJSFail checks that a hostile JS probe failed with one of the error
// names.
func wantJSFail(t *testing.T, rep map[string]jsProbe, probe string, names ...string) {
	t.Helper()
	p, ok := rep[probe]
	if !ok {
		t.Errorf("probe %s: no report", probe)
		return
	}
	if p.OK || !slices.Contains(names, p.Name) {
		t.Errorf("probe %s: %+v, want failure with one of %v", probe, p, names)
	}
}

// fill replaces __NAME__ placeholders in a script template.
func fill(src string, kv ...string) string {
	for i := 0; i+1 < len(kv); i += 2 {
		src = strings.ReplaceAll(src, "__"+kv[i]+"__", kv[i+1])
	}
	return src
}

// testdata reads a file of integration/testdata, wherever the test binary
// runs (the VM runs it in /tmp).
func testdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "integration", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostState is what a run may leave behind on the host.
type hostState struct {
	jailProcs []int    // processes running under a jail uid ([2^30, 2^31))
	mounts    []string // mountinfo lines naming pmjail
	tmpDirs   []string // /tmp/pmjail* entries
	shm       []string // SysV shared-memory segments
	zombies   []int    // zombie children of this test process
}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	var s hostState
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var uid, ppid int64 = -1, -1
		var state string
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			f := strings.Fields(v)
			if len(f) == 0 {
				continue
			}
			switch k {
			case "Uid":
				uid, _ = strconv.ParseInt(f[0], 10, 64)
			case "PPid":
				ppid, _ = strconv.ParseInt(f[0], 10, 64)
			case "State":
				state = f[0]
			}
		}
		if uid >= 1<<30 && uid < 1<<31 && ownedOrOrphaned(pid, self) {
			s.jailProcs = append(s.jailProcs, pid)
		}
		if state == "Z" && ppid == int64(self) {
			s.zombies = append(s.zombies, pid)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "pmjail") {
				s.mounts = append(s.mounts, line)
			}
		}
	}
	// pmjail names anything it might create in the temp dir pmjail*; no
	// test suite of this repository uses that prefix, since suites of other
	// packages run at the same time and would show here.
	s.tmpDirs, _ = filepath.Glob(filepath.Join(os.TempDir(), "pmjail*"))
	if b, err := os.ReadFile("/proc/sysvipc/shm"); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 1 {
			s.shm = lines[1:]
		}
	}
	return s
}

// newItems returns what is in after but not in before.
func newItems[T comparable](before, after []T) []T {
	var out []T
	for _, a := range after {
		if !slices.Contains(before, a) {
			out = append(out, a)
		}
	}
	return out
}

// assertNothingLeft checks the host against a snapshot taken before the
// runs: no jailed process, mount, temp dir or SysV segment appeared. Jailed
// processes of other tests running at the same time would show here too,
// so it waits a little for them to go.
func assertNothingLeft(t *testing.T, before hostState) {
	t.Helper()
	var after hostState
	deadline := time.Now().Add(3 * time.Second)
	for {
		after = snapshotHost(t)
		if len(newItems(before.jailProcs, after.jailProcs)) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := newItems(before.jailProcs, after.jailProcs); len(n) > 0 {
		t.Errorf("jailed processes left: %v", describePids(n))
	}
	if n := newItems(before.mounts, after.mounts); len(n) > 0 {
		t.Errorf("mounts left: %q", n)
	}
	if n := newItems(before.tmpDirs, after.tmpDirs); len(n) > 0 {
		t.Errorf("temp dirs left: %q", n)
	}
	if n := newItems(before.shm, after.shm); len(n) > 0 {
		t.Errorf("SysV shared memory left: %q", n)
	}
	if len(after.zombies) > 0 {
		t.Errorf("zombies left: %v", after.zombies)
	}
}

func describePids(pids []int) []string {
	var out []string
	for _, p := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		out = append(out, fmt.Sprintf("%d %q", p, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
	}
	return out
}

// jobCgroups lists the job cgroups (in any hierarchy) whose owner is pid:
// pmjail-<pid>-@<start>-<id>, and the cgroups its waiting init stages hold
// (pmjail-<pid>-@<start>-prestart-<id>, see reservedCgroups).
func jobCgroups(pid int) []string {
	var found []string
	prefix := fmt.Sprintf("pmjail-%d-", pid)
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), prefix) {
			found = append(found, path)
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

// runCgroups and reservedCgroups split jobCgroups(pid): the cgroups of
// runs, and the names of those a daemon's prestarted init stages wait with
// (cgroup.Manager.Reserve), one name per init stage whatever the
// hierarchies.
func runCgroups(pid int) []string {
	var runs []string
	for _, dir := range jobCgroups(pid) {
		if !cgroup.Reserved(filepath.Base(dir)) {
			runs = append(runs, dir)
		}
	}
	return runs
}

func reservedCgroups(pid int) []string {
	var names []string
	for _, dir := range jobCgroups(pid) {
		if n := filepath.Base(dir); cgroup.Reserved(n) && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// startPmjail starts the binary without waiting; the caller waits.
func startPmjail(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(pmjail, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &out
}

// childrenOf lists the pids whose parent is pid (a child belongs to the
// thread that started it, so every thread's list counts).
func childrenOf(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	var out []int
	for _, c := range childrenOf(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

// outliving waits up to wait for pids to die and returns those still
// alive when it ends. It waits on each one's pidfd, which becomes readable
// when the process exits, so it returns as soon as the last one has.
func outliving(pids []int, wait time.Duration) []int {
	deadline := time.Now().Add(wait)
	var living []int
	for _, p := range pids {
		if !exitsBy(p, deadline) {
			living = append(living, p)
		}
	}
	return living
}

// exitsBy reports whether pid has exited (or is a zombie) by deadline.
func exitsBy(pid int, deadline time.Time) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil { // no pidfds (before Linux 5.3): look every 20 ms
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		return !alive(pid)
	}
	defer unix.Close(fd)
	for {
		ms := max(time.Until(deadline).Milliseconds(), 0)
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(ms))
		switch {
		case n > 0:
			// Readable: the whole process has exited, though /proc may
			// still show it on its way out (state X) for a moment.
			return true
		case !errors.Is(err, unix.EINTR):
			return !alive(pid)
		}
	}
}

// named returns the pids whose command name is comm.
func named(pids []int, comm string) []int {
	var out []int
	for _, p := range pids {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(b)) == comm {
			out = append(out, p)
		}
	}
	return out
}

// alive reports whether pid exists and is no zombie.
func alive(pid int) bool {
	s := procState(pid)
	return s != "?" && s != "Z"
}

// procState is the state letter of pid ("?" when it is gone): the field
// after the command's closing parenthesis in /proc/PID/stat.
func procState(pid int) string {
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 {
		return string(stat[i+2])
	}
	return "?"
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "MemAvailable:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func itoa(n int) string { return strconv.Itoa(n) }

// startVictim starts a host process the attacks aim at; the test checks it
// survives, and kills it at the end.
func startVictim(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "120")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// ownedOrOrphaned reports whether a jailed process belongs to a supervisor
// this test started, or to none (a leak, whoever's): tests of other
// packages run their own jobs at the same time, under supervisors of
// their own.
func ownedOrOrphaned(pid, self int) bool {
	// Climb past the job's own processes to its supervisor.
	p := pid
	for jailed(p) {
		if p = parentOf(p); p <= 0 {
			return false
		}
	}
	if p == 1 {
		return true
	}
	for ; p > 1; p = parentOf(p) {
		if p == self {
			return true
		}
	}
	return false
}

func parentOf(pid int) int {
	status, err := jail.ProcStatus(strconv.Itoa(pid))
	if err != nil {
		return -1
	}
	ppid, _ := strconv.Atoi(status["PPid"])
	return ppid
}

func jailed(pid int) bool {
	status, err := jail.ProcStatus(strconv.Itoa(pid))
	if err != nil {
		return false
	}
	uid, _ := strconv.Atoi(strings.Fields(status["Uid"] + " -1")[0])
	return uid >= 1<<30 && uid < 1<<31
}
