package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

const hybridUnified = "/sys/fs/cgroup/unified"

// hybridV2 returns a Manager on the cgroup2 tree a hybrid host mounts at
// /sys/fs/cgroup/unified. That tree has no memory/pids/cpu controllers, but
// its core files (cgroup.procs, cgroup.kill, cgroup.freeze, cpu.stat) let
// the v2 code paths for placement, kill, freeze and removal run for real on
// a v1 host too.
func hybridV2(t *testing.T) *Manager {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(hybridUnified, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		if h, _ := Probe(); h.Mode == V2 {
			t.Skip("no hybrid cgroup2 mount; the v2 tests run on the unified hierarchy itself")
		}
		testenv.SkipOrFail(t, "no cgroup2 mounted at %s", hybridUnified)
	}
	ms, err := os.Open(procMountinfo)
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := parseMountinfo(ms)
	ms.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, unified := ownPaths(t)
	m, ok := findV2Mount(mounts, hybridUnified)
	if !ok {
		t.Fatalf("mountinfo lacks %s", hybridUnified)
	}
	dir, err := v2OwnDir(m, unified)
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{Mode: V2, Parent: map[string]string{UnifiedKey: dir}}
	err = probeChild(dir, func(child string) {
		h.Kill = exists(filepath.Join(child, "cgroup.kill"))
		if exists(filepath.Join(child, "cgroup.freeze")) {
			h.Controllers = append(h.Controllers, Freezer)
		}
	})
	if err != nil {
		testenv.SkipOrFail(t, "cgroup2 at %s not writable: %v", hybridUnified, err)
	}
	return &Manager{host: h, own: self()}
}

func TestV2PathsOnHybridTree(t *testing.T) {
	for _, kill := range []bool{true, false} {
		name := "cgroup.kill"
		if !kill {
			name = "freeze+SIGKILL"
		}
		t.Run(name, func(t *testing.T) {
			m := hybridV2(t)
			if kill && !m.host.Kill {
				testenv.SkipOrFail(t, "no cgroup.kill (Linux < 5.14)")
			}
			m.host.Kill = kill
			j := create(t, m, nil)
			fd, ok := j.FD()
			if !ok {
				t.Fatal("v2 job has no FD")
			}
			// Born in the job through CLONE_INTO_CGROUP.
			cmd := exec.Command("/bin/sh", "-c", `sleep 300 & (sleep 300 & wait) & while :; do :; done`)
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
			if err := cmd.Start(); err != nil {
				t.Fatalf("CLONE_INTO_CGROUP: %v", err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
			cg, err := os.ReadFile("/proc/" + itoa(cmd.Process.Pid) + "/cgroup")
			if err != nil || !strings.Contains(string(cg), "0::") || !strings.Contains(string(cg), j.Name()) {
				t.Fatalf("child cgroup %q, %v", cg, err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				pids, err := j.procs()
				if err != nil {
					t.Fatal(err)
				}
				u, err := j.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if len(pids) >= 4 && u.CPUTime > 50*time.Millisecond {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job never filled: %v %+v", pids, u)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := j.Delete(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				done <- err
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Errorf("shell: want killed, got %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("shell survived Delete")
			}
			assertGone(t, j)
			if _, ok := j.FD(); ok {
				t.Error("FD still open after Delete")
			}
		})
	}
}
