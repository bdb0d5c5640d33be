package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/internal/testenv"
)

// requireMode returns a Manager on a host of mode want. A host of the other
// cgroup mode is a legitimate skip even under CI=true: this project's
// machines are v1 (hybrid) and the VM run is v2, and each runs the other's
// tests as skips. Anything else missing goes through skipOrFail.
func requireMode(t *testing.T, want Mode) *Manager {
	t.Helper()
	h, _ := Probe()
	if h.Mode != want && h.Mode != Unavailable {
		switch want {
		case V2:
			t.Skip("cgroup v2 unified hierarchy not present")
		default:
			t.Skip("cgroup v1 hierarchy not present")
		}
	}
	return requireManager(t)
}

// requireManager returns a Manager for whatever mode the host has.
func requireManager(t *testing.T) *Manager {
	t.Helper()
	testenv.RequireRoot(t)
	m, err := NewManager()
	if errors.Is(err, ErrNotSupported) {
		testenv.SkipOrFail(t, "cgroups unusable: %v", err)
	}
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	return m
}

var idSeq atomic.Int64

// create makes a job with a unique id and removes it at the end of the test.
func create(t *testing.T, m *Manager, res *specs.LinuxResources) *Group {
	t.Helper()
	id := fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e6, idSeq.Add(1))
	j, err := m.Create(id, res)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := j.Delete(); err != nil {
			t.Errorf("cleanup Delete: %v", err)
		}
	})
	return j
}

// child is a process started by start; done closes once it is reaped.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // from Wait, valid after done
}

// start runs script under /bin/sh inside j: the shell waits on stdin until
// AddProc has placed it, so everything the script does is accounted to j.
func start(t *testing.T, j *Group, script string) *child {
	t.Helper()
	c := &child{cmd: exec.Command("/bin/sh", "-c", "read go; "+script), done: make(chan struct{})}
	in, err := c.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stdout, c.cmd.Stderr = io.Discard, io.Discard
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	if err := j.AddProc(c.cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc: %v", err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	in.Close()
	return c
}

// wait waits for c to exit and returns Wait's error.
func (c *child) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(limit):
		t.Fatalf("pid %d still running after %v", c.cmd.Process.Pid, limit)
		return nil
	}
}

// assertGone fails unless every directory of j has been removed.
func assertGone(t *testing.T, j *Group) {
	t.Helper()
	for k, dir := range j.Paths() {
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %q of %s still exists (%v)", k, dir, err)
		}
	}
}

// leftovers lists entries named for this process's jobs in every parent.
func leftovers(t *testing.T, m *Manager) []string {
	t.Helper()
	var out []string
	prefix := fmt.Sprintf("%s%d-", namePrefix, os.Getpid())
	for _, parent := range m.Host().Parent {
		ents, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				out = append(out, filepath.Join(parent, e.Name()))
			}
		}
	}
	return out
}

func i64(v int64) *int64   { return &v }
func u64(v uint64) *uint64 { return &v }

func itoa(i int) string { return strconv.Itoa(i) }
