package netns_test

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/netns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/pmjail/pmjail/internal/testenv"
)

// startSleeper starts a child that just waits, with extra clone flags, and
// kills and reaps it when the test ends.
func startSleeper(t *testing.T, cloneflags uintptr) int {
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
