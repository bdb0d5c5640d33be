package integration

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/jail"
)

// buildDirs lists the work directories of runtime builds (the Pyodide
// snapshot's, the Deno caches') in the state directory state.
func buildDirs(state string) []string {
	var dirs []string
	for _, pattern := range []string{".snapshot-build-*", ".deno-cache-build-*"} {
		m, _ := filepath.Glob(filepath.Join(state, pattern))
		dirs = append(dirs, m...)
	}
	return dirs
}

// killMidBuild starts `pmjail prepare` on its state directory, SIGKILLs
// it once a build's work directory appears that is not in known, and
// returns that directory. What the kill varies is the build's progress;
// the wait is on the directory's appearing, looked for every 2 ms.
func killMidBuild(t *testing.T, known []string) string {
	t.Helper()
	cmd, out := startPmjail(t, "prepare")
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		for _, d := range buildDirs(os.Getenv("PMJAIL_STATE_DIR")) {
			if !slices.Contains(known, d) {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
				if _, err := os.Stat(d); err != nil {
					t.Fatalf("the build's directory %s went with its SIGKILLed builder: nothing to sweep (%v)", d, err)
				}
				return d
			}
		}
		if cmd.ProcessState != nil || procState(cmd.Process.Pid) == "Z" {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Fatalf("pmjail prepare made no build directory besides %v: %s", known, out)
	return ""
}

// TestPrepareKilledBuildSwept: `pmjail prepare` (or a daemon's start)
// SIGKILLed while it builds the runtimes' caches leaves the build's work
// directory in the state directory, a few MB each; the next prepare and
// the next daemon start remove those older than any build lasts, and
// leave a younger one, which may be another process's build under way.
func TestPrepareKilledBuildSwept(t *testing.T) {
	state := filepath.Join(daemonDir(t), "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PMJAIL_STATE_DIR", state)
	before := snapshotHost(t)
	first := killMidBuild(t, nil)
	second := killMidBuild(t, []string{first})
	old := time.Now().Add(-2 * time.Hour) // older than any build lasts
	if err := os.Chtimes(first, old, old); err != nil {
		t.Fatal(err)
	}

	inv := pmjailCmd(t, "", "prepare")
	if inv.ExitCode != 0 {
		t.Fatalf("prepare after the kills: exit %d %s %s", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	if _, err := os.Stat(first); err == nil || !strings.Contains(inv.Stdout, "removed stale "+first) {
		t.Errorf("prepare left the killed build's %s (%v): %s", first, err, inv.Stdout)
	}
	if _, err := os.Stat(second); err != nil {
		t.Errorf("prepare removed %s, a build directory too young to be known abandoned: %v", second, err)
	}

	if err := os.Chtimes(second, old, old); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 1, 1, "0660"))
	if _, err := os.Stat(second); err == nil {
		t.Errorf("the daemon's start left the killed build's %s", second)
	}
	if !strings.Contains(d.logs.String(), "removed the work directory of a killed build") {
		t.Errorf("the daemon's start did not log its sweep:\n%s", d.logs)
	}
	d.stop(t)
	if left := buildDirs(state); len(left) > 0 {
		t.Errorf("build directories left: %v", left)
	}
	assertNothingLeft(t, before)
}

// TestDaemonFailedStartLeavesNothing: a daemon whose start fails after
// its server has begun to fill its pool and warm runtimes (here its async
// store is another daemon's: it waits a second for the lock, then gives
// up) ends what it started on its way out: no cgroup of its pid is left
// for a later start to sweep, and none of its processes outlives it. The
// failures after the server is made (the queue, metrics.listen) take the
// same way out.
func TestDaemonFailedStartLeavesNothing(t *testing.T) {
	before := snapshotHost(t)
	dir := daemonDir(t)
	cfg := fmt.Sprintf(`{"version": 1, "max_concurrency": 2, "socket": {"mode": "0660"}, "warm": {"deno": 2}, "runs": {"dir": %q}}`, filepath.Join(dir, "state"))
	holder := startDaemon(t, dir, cfg)

	other := daemonDir(t)
	cmd := exec.Command(pmjail, "serve", "--socket", filepath.Join(other, "pmjail.sock"), "--config", filepath.Join(dir, "config.json"))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(logs.String(), "another process holds the file's lock") {
		t.Fatalf("the second daemon on the store: %v, want it to fail on the store's lock: %s", err, &logs)
	}
	if left := jobCgroups(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("the daemon that failed to start left cgroups: %v", left)
	}
	holder.stop(t)
	assertNothingLeft(t, before)
}

// TestCLIHangupAndClosedPipeLeaveNothing: `pmjail run` whose reader
// stops (`pmjail run x.js | head -1`) or whose terminal hangs up was
// killed outright by SIGPIPE or SIGHUP: its guest died with its init
// stage, but its cgroup stayed for a later run's sweep. Both now cancel
// the run as SIGINT does: the run is torn down and nothing of it is left
// once pmjail has exited.
func TestCLIHangupAndClosedPipeLeaveNothing(t *testing.T) {
	before := snapshotHost(t)
	lines := filepath.Join(t.TempDir(), "lines.js")
	writeFile(t, lines, `for (let i = 0; ; i++) { console.log("line " + i); await new Promise(r => setTimeout(r, 20)); }`)
	for _, sig := range []syscall.Signal{syscall.SIGPIPE, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(pmjail, "run", "--timeout", "60s", lines)
			out, stderr := startLines(t, cmd)
			if sig == syscall.SIGPIPE {
				out.Close() // the reader goes, as head does: the next line's write breaks the pipe
			} else if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			st := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if st.Signaled() {
				t.Errorf("pmjail died of %v rather than cancel its run (%s)", st.Signal(), stderr)
			} else if st.ExitStatus() != 125 || !strings.Contains(stderr.String(), "cancelled") {
				t.Errorf("pmjail exited %d: %s, want 125 and the run cancelled", st.ExitStatus(), stderr)
			}
			if left := jobCgroups(cmd.Process.Pid); len(left) > 0 {
				t.Errorf("cgroups of the run left once pmjail exited: %v", left)
			}
		})
	}
	assertNothingLeft(t, before)
}

// TestDaemonOutlivesItsLogReader: a daemon whose log goes to a pipe
// (`pmjail serve 2>&1 | shipper`) whose reader ends was killed by
// SIGPIPE at its next log line, with every run in flight; it now loses
// the lines and goes on serving.
func TestDaemonOutlivesItsLogReader(t *testing.T) {
	dir := daemonDir(t)
	cfgPath := filepath.Join(dir, "config.json")
	writeFile(t, cfgPath, fmt.Sprintf(baseConfig, 1, 1, "0660"))
	sock := filepath.Join(dir, "pmjail.sock")
	cmd := exec.Command(pmjail, "serve", "--socket", sock, "--config", cfgPath)
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	// Its first line says it has started; then the reader goes.
	if _, err := bufio.NewReader(logs).ReadString('\n'); err != nil {
		t.Fatalf("the daemon's first log line: %v", err)
	}
	logs.Close()
	c := checked(t, sock)
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Health(context.Background()); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the daemon died once its log's reader went: %v", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not answer within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err := c.Run(context.Background(), hello())
	if err != nil || res.Status != jail.StatusOK {
		t.Fatalf("a run on the daemon whose log's reader went: %+v %v (state %v)", res, err, cmd.ProcessState)
	}
}

// bigTarball writes an npm package tarball of many incompressible files,
// whose unpacking takes long enough to be killed midway.
func bigTarball(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	add := func(name string, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	add("package/package.json", []byte(`{"name": "bigpkg", "version": "1.0.0"}`))
	body := make([]byte, 16<<10)
	for i := range 1500 {
		_, _ = rand.Read(body)
		add(fmt.Sprintf("package/f%d.js", i), []byte(hex.EncodeToString(body)))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPackagesAddKilledSwept: `pmjail packages add` SIGKILLed while it
// unpacks leaves its work directory (the package unpacked so far) in the
// store, which nothing removed; the next add, prepare or daemon start
// removes it once it is older than any add lasts, and leaves a younger
// one, which may be another add under way.
func TestPackagesAddKilledSwept(t *testing.T) {
	dir := daemonDir(t)
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PMJAIL_STATE_DIR", state)
	t.Setenv("PMJAIL_PACKAGES_DIR", "")
	tgz := filepath.Join(dir, "bigpkg-1.0.0.tgz")
	bigTarball(t, tgz)

	cmd, out := startPmjail(t, "packages", "add", tgz)
	var left string
	for deadline := time.Now().Add(time.Minute); left == "" && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(state, "packages", ".add-*")); len(m) > 0 {
			left = m[0]
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if left == "" {
		t.Fatalf("packages add made no work directory: %s", out)
	}
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the add's work directory went with its SIGKILLed process: nothing to sweep (%v)", err)
	}

	inv := pmjailCmd(t, "", "packages", "add", tgz)
	if inv.ExitCode != 0 {
		t.Fatalf("packages add after the kill: exit %d %s %s", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	if _, err := os.Stat(left); err != nil {
		t.Errorf("packages add removed %s, a work directory too young to be known abandoned: %v", left, err)
	}
	old := time.Now().Add(-2 * time.Hour) // older than any add lasts
	if err := os.Chtimes(left, old, old); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 1, 1, "0660"))
	if _, err := os.Stat(left); err == nil {
		t.Errorf("the daemon's start left the killed add's %s", left)
	}
	if !strings.Contains(d.logs.String(), left) {
		t.Errorf("the daemon's start did not log removing %s:\n%s", left, d.logs)
	}
	d.stop(t)
}

// TestCLIHangupIgnoredKeepsTheRun: `nohup pmjail run x.js &` (SIGHUP
// ignored from the start, as nohup and a script's background jobs have
// it) must survive the terminal's hang-up. Asking for SIGHUP among the
// ending signals installs a handler over the inherited SIG_IGN (Go's
// signal.Notify does), so the hang-up cancelled the run (exit 125) that
// nohup was meant to keep.
func TestCLIHangupIgnoredKeepsTheRun(t *testing.T) {
	before := snapshotHost(t)
	lines := filepath.Join(t.TempDir(), "lines.js")
	writeFile(t, lines, `for (let i = 0; i < 10; i++) { console.log("line " + i); await new Promise(r => setTimeout(r, 20)); }`)
	// The shell ignores SIGHUP and execs pmjail, which inherits that.
	cmd := exec.Command("/bin/sh", "-c", `trap "" HUP; exec "$0" "$@"`, pmjail, "run", "--timeout", "60s", lines)
	// (By the first line pmjail has replaced the shell.)
	out, stderr := startLines(t, cmd)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	_ = cmd.Wait()
	st := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if st.Signaled() || st.ExitStatus() != 0 || !strings.HasSuffix(string(rest), "line 9\n") {
		t.Errorf("pmjail with SIGHUP ignored, hung up: %v, output after the first line %q (%s); want the run kept to its end, exit 0", st, rest, stderr)
	}
	assertNothingLeft(t, before)
}

// startLines starts cmd, a pmjail run of a guest that prints "line 0",
// "line 1", ..., and returns once its first line is read (the run is
// under way): its output, the rest to read, and its stderr.
func startLines(t *testing.T, cmd *exec.Cmd) (io.ReadCloser, *bytes.Buffer) {
	t.Helper()
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("line 0\n"))
	if _, err := io.ReadFull(out, first); err != nil || string(first) != "line 0\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the run's first line: %q %v (%s)", first, err, stderr)
	}
	return out, stderr
}
