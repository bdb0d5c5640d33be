package jail

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/kfile"
	"github.com/pmjail/pmjail/jail/rootfs"
)

// Ids inside the job's user namespace: the init stage runs as root there
// (mapped to an unprivileged host id) and the guest as guestID.
const (
	nsRootID = 0
	guestID  = rootfs.GuestID
)

// Host ids for jobs come from a range no ordinary account uses. Each
// concurrent job leases a slot: its user namespace's root maps to
// idBase+2*slot and the guest to idBase+2*slot+1, so no two live jobs share
// a host id, whichever supervisor process started them.
const (
	idBase  = 1 << 30
	idSlots = 1 << 14
)

// MaxJobs is how many jobs one host can run at once, across every
// supervisor process: one id slot each.
const MaxJobs = idSlots

// LeaseDir holds one lease file per slot. It lies in a directory only root
// can create (/run is root's), and is root's alone: no other local user
// can take a slot, and so block runs, as one could bind the abstract
// socket names that were the leases before. systemd's RuntimeDirectory
// makes /run/pmjail for the daemon, writable under its sandboxing.
const LeaseDir = "/run/pmjail/leases"

// ErrNoSlot: every job id slot is leased.
var ErrNoSlot = errors.New("no free job id slot")

// idLease holds a slot for as long as its file is locked (flock): the
// kernel drops the lock when the supervisor exits, however it dies. The
// file names the job's pid 1 (hold), and the slot stays taken while that
// process lives: a supervisor's death frees the lock at once, while its
// job's processes are still being killed, and their ids must not go to a
// new job before they are gone. A pid namespace's processes are all gone
// before its pid 1 has finished exiting.
type idLease struct {
	fd   int
	slot int
}

func (l *idLease) rootID() int  { return idBase + 2*l.slot }
func (l *idLease) guestID() int { return idBase + 2*l.slot + 1 }

// hold records pid, the job's pid 1, as the slot's holder.
func (l *idLease) hold(pid int) error {
	start, ok := processStart(pid)
	if !ok {
		return fmt.Errorf("record the holder of job id slot %d: process %d is gone", l.slot, pid)
	}
	rec := []byte(strconv.Itoa(pid) + " " + start + "\n")
	if err := unix.Ftruncate(l.fd, 0); err != nil {
		return os.NewSyscallError("ftruncate lease", err)
	}
	if _, err := unix.Pwrite(l.fd, rec, 0); err != nil {
		return os.NewSyscallError("write lease", err)
	}
	return nil
}

// release frees the slot; its job's pid 1 has been reaped by now (or
// never started), so the record goes with the lock.
func (l *idLease) release() {
	if l.fd >= 0 {
		_ = unix.Ftruncate(l.fd, 0)
		unix.Close(l.fd)
		l.fd = -1
	}
}

func leaseIDs() (*idLease, error) {
	dir, err := leaseDir()
	if err != nil {
		return nil, err
	}
	start := rand.IntN(idSlots)
	for i := range idSlots {
		slot := (start + i) % idSlots
		fd, err := unix.Openat(dir, strconv.Itoa(slot), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open the lease of job id slot %d: %w", slot, os.NewSyscallError("openat", err))
		}
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil && !holderLives(fd) {
			return &idLease{fd: fd, slot: slot}, nil
		}
		unix.Close(fd)
		if err != nil && !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock the lease of job id slot %d: %w", slot, os.NewSyscallError("flock", err))
		}
	}
	return nil, ErrNoSlot
}

// holderLives reports whether the lease file fd names a job's pid 1 that
// is still running: one whose supervisor died, so that its lock is free,
// but which has not finished dying.
func holderLives(fd int) bool {
	var buf [64]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil || n == 0 {
		return false
	}
	pid, start, ok := bytes.Cut(bytes.TrimSpace(buf[:n]), []byte(" "))
	if !ok {
		return false
	}
	p, err := strconv.Atoi(string(pid))
	if err != nil || p <= 0 {
		return false
	}
	now, alive := processStart(p)
	return alive && now == string(start)
}

// processStart is pid's start time (kfile.Start), and false if pid is
// gone or a zombie: a zombie pid 1 has seen every process of its pid
// namespace reaped.
func processStart(pid int) (string, bool) {
	state, start, err := kfile.Start(pid)
	if err != nil || state == 'Z' || state == 'X' {
		return "", false
	}
	return start, true
}

// leaseDirFD is LeaseDir, opened once it has been checked.
var leaseDirFD struct {
	sync.Mutex
	fd     int
	opened bool
}

// leaseDir opens LeaseDir, making it and its parent if need be, and
// checks that only this process's user (root) can change either: a
// directory another user could write to would let them take slots.
func leaseDir() (int, error) {
	leaseDirFD.Lock()
	defer leaseDirFD.Unlock()
	if leaseDirFD.opened {
		return leaseDirFD.fd, nil
	}
	// A system without /run (a bare initramfs) gets one, root's as usual.
	if err := os.MkdirAll(filepath.Dir(filepath.Dir(LeaseDir)), 0o755); err != nil {
		return -1, fmt.Errorf("job id leases: %w", err)
	}
	for _, d := range []struct {
		path string
		mode uint32
	}{{filepath.Dir(LeaseDir), 0o755}, {LeaseDir, 0o700}} {
		if err := unix.Mkdir(d.path, d.mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("job id leases: %w", &os.PathError{Op: "mkdir", Path: d.path, Err: err})
		}
		var st unix.Stat_t
		if err := unix.Lstat(d.path, &st); err != nil {
			return -1, fmt.Errorf("job id leases: %w", &os.PathError{Op: "lstat", Path: d.path, Err: err})
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 ||
			d.path == LeaseDir && st.Mode&0o077 != 0 {
			return -1, fmt.Errorf("job id leases: %s is not a directory only uid %d can change (mode %o, owner %d)",
				d.path, os.Geteuid(), st.Mode, st.Uid)
		}
	}
	fd, err := unix.Open(LeaseDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("job id leases: %w", &os.PathError{Op: "open", Path: LeaseDir, Err: err})
	}
	leaseDirFD.fd, leaseDirFD.opened = fd, true
	return fd, nil
}
