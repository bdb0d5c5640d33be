package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
)

// ownerEnv makes the test binary the supervisor of
// TestSweepRemovesOrphansOfAReusedPid: it makes a job cgroup with a
// sleeping task in it, says the cgroup's name, and waits to be killed.
const ownerEnv = "PMJAIL_CGROUP_TEST_OWNER"

// TestSweepRemovesOrphansOfAReusedPid: a supervisor killed mid-run leaves
// its job's cgroup and task; by the time a new supervisor starts, the
// kernel has given the dead one's pid to an unrelated process (here
// forced: ns_last_pid set just below it). The sweep took any live pid for
// the owner, and the orphan, its task still running, stayed for as long
// as that process lived. It must go, and the unrelated process, and the
// sweeper's own jobs, stay.
func TestSweepRemovesOrphansOfAReusedPid(t *testing.T) {
	if os.Getenv(ownerEnv) == "1" {
		ownerMain()
		return
	}
	m := requireManager(t)
	const lastPid = "/proc/sys/kernel/ns_last_pid"
	_, err := os.Stat(lastPid)
	testenv.Need(t, err == nil, lastPid+" (checkpoint/restore)")

	// The dead supervisor: a process of its own, killed once its job runs.
	sup := exec.Command(os.Args[0], "-test.run=^TestSweepRemovesOrphansOfAReusedPid$")
	sup.Env = append(os.Environ(), ownerEnv+"=1")
	sup.Stderr = os.Stderr
	out, err := sup.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := sup.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	_ = sup.Process.Kill()
	_ = sup.Wait()
	name, ok := strings.CutPrefix(strings.TrimSpace(line), "job ")
	if err != nil || !ok {
		t.Fatalf("the supervisor said %q, %v: want its job's name", line, err)
	}
	t.Cleanup(func() { removeNamed(t, m, name) })
	pid := sup.Process.Pid

	// Its pid goes to an unrelated process. Other processes of the host
	// may take it first: then that one is let go and it is tried again.
	var reuser *exec.Cmd
	for try := 0; reuser == nil && try < 200; try++ {
		if err := os.WriteFile(lastPid, []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Fatal(err)
		}
		c := exec.Command("/bin/sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if c.Process.Pid == pid {
			reuser = c
			break
		}
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	if reuser == nil {
		t.Fatalf("pid %d was not given to a new process in 200 tries", pid)
	}
	t.Cleanup(func() { _ = reuser.Process.Kill(); _ = reuser.Wait() })
	mine := create(t, m, nil)

	removed, err := m.Sweep()
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if !slices.Contains(removed, name) {
		t.Errorf("Sweep removed %v: the orphan %s of the dead pid %d, now another process's, stayed", removed, name, pid)
	}
	if slices.Contains(removed, mine.Name()) {
		t.Errorf("Sweep removed the sweeper's own job %s", mine.Name())
	}
	for _, parent := range m.Host().Parent {
		if _, err := os.Lstat(filepath.Join(parent, name)); err == nil {
			t.Errorf("%s is still in %s", name, parent)
		}
	}
	if err := reuser.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the process that reused pid %d: %v", pid, err)
	}
}

// ownerMain is the supervisor's side: its job's cgroup, with a sleeping
// task in it, then a wait for the kill.
func ownerMain() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "owner:", err)
		os.Exit(1)
	}
	m, err := NewManager()
	if err != nil {
		fail(err)
	}
	j, err := m.Create("reused", nil)
	if err != nil {
		fail(err)
	}
	task := exec.Command("/bin/sleep", "300")
	if err := task.Start(); err != nil {
		fail(err)
	}
	if err := j.AddProc(task.Process.Pid); err != nil {
		fail(err)
	}
	fmt.Printf("job %s\n", j.Name())
	// Until the test kills it; its stdin closes if the test dies first.
	_, _ = os.Stdin.Read(make([]byte, 1))
	_ = j.Delete()
	os.Exit(0)
}

// removeNamed removes the job cgroup name, with its tasks, if it is still
// there: what a failed sweep left.
func removeNamed(t *testing.T, m *Manager, name string) {
	paths := map[string]string{}
	for key, parent := range m.Host().Parent {
		if dir := filepath.Join(parent, name); exists(dir) {
			paths[key] = dir
		}
	}
	if len(paths) == 0 {
		return
	}
	j := m.newJob(name, paths)
	if err := m.load(j); err != nil {
		t.Errorf("cleanup of %s: %v", name, err)
		return
	}
	if err := j.Delete(); err != nil {
		t.Errorf("cleanup of %s: %v", name, err)
	}
}
