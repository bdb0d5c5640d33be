package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLeaseHeldWhileItsJobLives: a slot whose lock is free (its supervisor
// died) stays taken while the job's pid 1 it names still runs, and is free
// once that process is gone.
func TestLeaseHeldWhileItsJobLives(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("leases live in a directory only root can make")
	}
	job := exec.Command("sleep", "60")
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = job.Process.Kill(); _ = job.Wait() })
	lease, err := leaseIDs()
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.hold(job.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// The supervisor dies: its lock goes, the record stays.
	unix.Close(lease.fd)
	dir, err := leaseDir()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Openat(dir, strconv.Itoa(lease.slot), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("the dead supervisor's lock: %v", err)
	}
	if !holderLives(fd) {
		t.Errorf("slot %d free while the job's pid 1 (%d) runs", lease.slot, job.Process.Pid)
	}
	_ = job.Process.Kill()
	_ = job.Wait()
	if holderLives(fd) {
		t.Errorf("slot %d still taken after the job's pid 1 was reaped", lease.slot)
	}
	_ = unix.Ftruncate(fd, 0)
}

// TestLeaseDirOnlyRoots: the lease directory is root's alone, and a
// lease's file is in it.
func TestLeaseDirOnlyRoots(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("leases live in a directory only root can make")
	}
	lease, err := leaseIDs()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.release()
	var st unix.Stat_t
	if err := unix.Lstat(LeaseDir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Mode&0o077 != 0 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("%s: owner %d mode %o, want a directory of root's alone", LeaseDir, st.Uid, st.Mode)
	}
	if _, err := os.Stat(filepath.Join(LeaseDir, strconv.Itoa(lease.slot))); err != nil {
		t.Errorf("lease file: %v", err)
	}
}
