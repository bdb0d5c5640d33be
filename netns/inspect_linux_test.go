package netns_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/netns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

// startSleeper starts a child that just waits, with extra clone flags, and
// kills and reaps it when the test ends.
func startSleeper(t testing.TB, cloneflags uintptr) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: cloneflags, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		testenv.Need(t, cloneflags == 0, "network namespaces ("+err.Error()+")")
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

func TestInspectIsolatedChild(t *testing.T) {
	testenv.RequireRoot(t)
	pid := startSleeper(t, syscall.CLONE_NEWNET)
	r, err := netns.Inspect(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Isolated || r.Reason != "" {
		t.Fatalf("child in CLONE_NEWNET not isolated: %+v", r)
	}
	if r.HostInode == 0 || r.HostInode == r.JobInode {
		t.Fatalf("inodes: host %d, job %d", r.HostInode, r.JobInode)
	}
	if len(r.Interfaces) != 1 || r.Interfaces[0] != (netns.Interface{Name: "lo", Up: false}) {
		t.Fatalf("interfaces %+v, want only lo, down", r.Interfaces)
	}
}

func TestInspectSharedNamespace(t *testing.T) {
	pid := startSleeper(t, 0)
	r, err := netns.Inspect(pid)
	if err != nil {
		t.Fatal(err)
	}
	if r.Isolated || r.HostInode != r.JobInode || r.Reason == "" {
		t.Fatalf("child without CLONE_NEWNET reported isolated: %+v", r)
	}
}

func TestInspectExtraInterface(t *testing.T) {
	testenv.RequireRoot(t)
	pid := startSleeper(t, syscall.CLONE_NEWNET)
	// A bridge inside the throwaway namespace (dummy and veth may be
	// modules a host lacks; bridge is common): it vanishes with it.
	ns, err := vnetns.GetFromPid(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	err = h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "pmjbr0"}})
	testenv.Need(t, err == nil, "bridge network links")
	r, err := netns.Inspect(pid)
	if err != nil {
		t.Fatal(err)
	}
	if r.Isolated || len(r.Interfaces) != 2 || r.Reason == "" {
		t.Fatalf("namespace with a bridge reported isolated: %+v", r)
	}
}

func TestInspectGonePid(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.Inspect(cmd.Process.Pid); err == nil {
		t.Fatal("Inspect of an exited pid succeeded")
	}
}

// TestInspectMovesNoSharedThread: the goroutine that calls Inspect keeps
// its thread in its namespace the whole time (a watcher reads it while
// Inspect runs, again and again), and once Inspect returns no thread of
// the process is left in the job's namespace.
func TestInspectMovesNoSharedThread(t *testing.T) {
	testenv.RequireRoot(t)
	pid := startSleeper(t, syscall.CLONE_NEWNET)
	job, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		home, err := os.Readlink(self)
		if err != nil {
			errc <- err
			return
		}
		stop := make(chan struct{})
		moved := make(chan string, 1)
		go func() {
			defer close(moved)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ns, err := os.Readlink(self); err == nil && ns != home {
					moved <- ns
					return
				}
			}
		}()
		for range 300 {
			if _, err := netns.Inspect(pid); err != nil {
				close(stop)
				errc <- err
				return
			}
		}
		close(stop)
		if ns, ok := <-moved; ok {
			errc <- fmt.Errorf("the calling thread was seen in %s during Inspect (home %s)", ns, home)
			return
		}
		if ns, _ := os.Readlink(self); ns != home {
			errc <- fmt.Errorf("the calling thread is in %s after Inspect (home %s)", ns, home)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if ns, _ := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); ns == job {
			t.Errorf("thread %s is still in the job's namespace %s", task.Name(), job)
		}
	}
}

// TestInspectSparesPooledThreadsChildren: a child's parent-death signal
// fires when the thread that started it ends, and children are started
// from threads the scheduler pools. Inspect must end no thread, or it
// would kill some job.
func TestInspectSparesPooledThreadsChildren(t *testing.T) {
	testenv.RequireRoot(t)
	target := startSleeper(t, syscall.CLONE_NEWNET)
	var kids []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			pid := startSleeper(t, 0)
			mu.Lock()
			kids = append(kids, pid)
			mu.Unlock()
		})
	}
	wg.Wait()
	for range 100 {
		if _, err := netns.Inspect(target); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range kids {
		if st := state(t, pid); st == "Z" || st == "X" {
			t.Errorf("child %d started from a pooled thread died during Inspect (state %s)", pid, st)
		}
	}
}

// state is the process state letter of pid (/proc/PID/stat's third field).
func state(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	st, _, _ := strings.Cut(rest, " ")
	return st
}
