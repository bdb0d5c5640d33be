package jail

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/runtimes"
)

// TestRunInitKilledIsNotTheGuests: the jail's pid 1 killed from outside
// the run (an operator, the OOM killer) while the guest runs is no exit
// of the guest's: the run is an internal error saying so, not the
// guest's exit 137.
func TestRunInitKilledIsNotTheGuests(t *testing.T) {
	testenv.RequireRoot(t)
	// The guest says it runs on its channel, then waits to be ended.
	const script = `printf x > /pmjail/channel/out; while :; do read x < /pmjail/channel/in; done`
	launch := &runtimes.Launch{Program: "/bin/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/nonexistent"}, Channel: true}
	spec, err := rootfs.NewSpec(launch, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	job := &Job{ID: "initkill", Spec: spec.Spec, Files: launch.Files, Timeout: 10 * time.Second, OutputLimit: 1 << 20,
		Channel: func(ctx context.Context, conn net.Conn) error {
			var b [1]byte
			if _, err := conn.Read(b[:]); err != nil {
				return err
			}
			pid, err := jailInit()
			if err != nil {
				return err
			}
			return syscall.Kill(pid, syscall.SIGKILL)
		},
	}
	out := Run(context.Background(), job)
	if out.Status != StatusInternalError || !errors.Is(out.Err, ErrInitEnded) || out.Signal != "" {
		t.Fatalf("status %s, exit %d, signal %q, err %v (%s); want internal_error for ErrInitEnded, no signal", out.Status, out.ExitCode, out.Signal, out.Err, out.Message)
	}
}

// jailInit is the host pid of this process's one child that is pid 1 of
// its own pid namespace: a running job's init stage.
func jailInit() (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := "PPid:\t" + strconv.Itoa(os.Getpid()) + "\n"
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil || !strings.Contains(string(status), self) {
			continue
		}
		for line := range strings.Lines(string(status)) {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return pid, nil
			}
		}
	}
	return 0, errors.New("no child is pid 1 of a pid namespace")
}
