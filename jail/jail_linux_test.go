package jail

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/proctest"
	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/runtimes"
)

// inRecvmsg reports whether the process pid (or the thread the path names)
// sits in recvmsg: an init stage waiting for its supervisor's next message.
func inRecvmsg(pid string) bool {
	sc, err := os.ReadFile("/proc/" + pid + "/syscall")
	return err == nil && strings.HasPrefix(string(sc), fmt.Sprintf("%d ", unix.SYS_RECVMSG))
}

// shellJob runs script under /bin/sh in a root that holds the shell, its
// libraries and binds.
func shellJob(t *testing.T, script string, lim rootfs.Limits, binds ...runtimes.Bind) *Job {
	t.Helper()
	launch := &runtimes.Launch{Program: "/bin/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/nonexistent"}, Binds: binds}
	spec, err := rootfs.NewSpec(launch, lim)
	if err != nil {
		t.Fatal(err)
	}
	return &Job{ID: "test", Spec: spec.Spec, Timeout: 10 * time.Second, OutputLimit: 1 << 20}
}

// outlastReadBack keeps a shell guest busy (only builtins: its root has
// no sleep) long enough for its state to be read back while it runs,
// with room for a loaded machine's stall between its start and the read.
const outlastReadBack = `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done`

var testLimits = rootfs.Limits{TmpBytes: 1 << 20, OpenFiles: 64, FileBytes: 1 << 20}

func TestRunContainsAShell(t *testing.T) {
	testenv.RequireRoot(t)
	// Only shell builtins: the root holds nothing but /bin/sh and its libraries.
	out := Run(context.Background(), shellJob(t, `echo "$(cat /etc/hostname 2>&1 || echo none)"; read h < /proc/sys/kernel/hostname 2>/dev/null; echo ok > /tmp/x && echo tmp-writable; (echo x > /x) 2>/dev/null || echo root-readonly; exit 7`, testLimits))
	if out.Status != StatusError || out.ExitCode != 7 {
		t.Fatalf("status %s exit %d message %q stderr %q", out.Status, out.ExitCode, out.Message, out.Stderr)
	}
	for _, want := range []string{"tmp-writable", "root-readonly"} {
		if !strings.Contains(string(out.Stdout), want) {
			t.Errorf("stdout %q lacks %q", out.Stdout, want)
		}
	}
	if o := out.Observed; o != nil && o.Error == "" {
		if !o.NoNewPrivs || !o.NoCapabilities() || !o.RootReadOnly || o.HostUID < idBase {
			t.Errorf("observed %+v", o)
		}
	}
}

func TestRunTimeoutKillsTheTree(t *testing.T) {
	testenv.RequireRoot(t)
	// The forked loops keep the shell's command line, marker and all: a
	// process left anywhere on the host after Run carries it.
	marker := fmt.Sprintf("pmjail-tree-%d-%d", os.Getpid(), time.Now().UnixNano())
	job := shellJob(t, `while :; do :; done & while :; do :; done # `+marker, testLimits)
	job.Timeout = 500 * time.Millisecond
	start := time.Now()
	out := Run(context.Background(), job)
	if out.Status != StatusTimeout || out.ExitCode != 124 || time.Since(start) > 5*time.Second {
		t.Fatalf("status %s exit %d after %v", out.Status, out.ExitCode, time.Since(start))
	}
	if left := processesWith(t, marker); len(left) > 0 {
		t.Fatalf("processes of the timed-out job still running after Run: %v", left)
	}
}

// processesWith lists the pids whose command line holds marker.
func processesWith(t *testing.T, marker string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func TestRunOutputLimit(t *testing.T) {
	testenv.RequireRoot(t)
	job := shellJob(t, `while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done`, testLimits)
	job.OutputLimit = 1000
	out := Run(context.Background(), job)
	if out.Status != StatusOutputLimit || len(out.Stdout) != 1000 || !out.Truncated.Stdout {
		t.Fatalf("status %s stdout %d bytes truncated %v", out.Status, len(out.Stdout), out.Truncated)
	}
}

func TestRunSetupFailureNamesTheStage(t *testing.T) {
	testenv.RequireRoot(t)
	job := shellJob(t, `true`, testLimits)
	job.Spec.Mounts = append(job.Spec.Mounts, job.Spec.Mounts[len(job.Spec.Mounts)-1])
	job.Spec.Mounts[len(job.Spec.Mounts)-1].Source = "/nonexistent-pmjail-source"
	out := Run(context.Background(), job)
	if out.Status != StatusInternalError || out.ExitCode != 125 || out.InitStage != StageBindSource || !strings.Contains(out.Message, "nonexistent-pmjail-source") {
		t.Fatalf("status %s exit %d stage %q message %q", out.Status, out.ExitCode, out.InitStage, out.Message)
	}
}

// TestRunReleasesTheMountNamespace: the job's mount namespace, held past
// the runtime's exit so that its teardown is not on the result's path, is
// let go soon after Run returns.
func TestRunReleasesTheMountNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	out := Run(context.Background(), shellJob(t, `echo ok`, testLimits))
	if out.Status != StatusOK {
		t.Fatalf("status %s %q stderr %q", out.Status, out.Message, out.Stderr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		held := mountNSFds(t)
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after Run this process still holds mount namespaces: %v", held)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mountNSFds lists this process's fds that hold a mount namespace.
func mountNSFds(t *testing.T) []string {
	t.Helper()
	var held []string
	for fd, target := range proctest.FDTargets(t) {
		if strings.HasPrefix(target, "mnt:") {
			held = append(held, fd+" "+target)
		}
	}
	return held
}
