package spawn

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel charges some per-user budgets (inotify instances and watches,
// fanotify groups, user namespaces, POSIX message queue bytes, pending
// signals, tasks) at every level of user namespaces: at the level above a
// job's namespace, to the uid that owns it, which is the effective uid of
// the process that created it. Created by a root supervisor, a job's
// objects were charged to host root, and a guest could take host root's
// whole budget (the 128 inotify instances of fs.inotify.max_user_instances).
// So the thread that clones a job's user namespace takes the job's own host
// id (the one the namespace's root maps to) as its effective uid for the
// clone, keeping its capabilities: the namespace is then owned, and its
// budgets charged, by the job's lease.
// An owner's processes outside the namespace hold every capability in it;
// none runs as that id (it is the namespace root's; a guest without a user
// namespace runs as the lease's other id), and the lease is the job's alone.

// namespaceOwner is the host uid that owns the user namespace attr creates:
// the host id its root (id 0) maps to. ok is false when attr makes no user
// namespace or the supervisor is not root (its budgets are its own).
func namespaceOwner(attr *syscall.SysProcAttr) (uid int, ok bool) {
	if attr.Cloneflags&unix.CLONE_NEWUSER == 0 || os.Geteuid() != 0 {
		return 0, false
	}
	for _, m := range attr.UidMappings {
		if m.ContainerID == 0 && m.Size >= 1 {
			return m.HostID, true
		}
	}
	return 0, false
}

// threadCreds is what ownNamespacesAs changes on the calling thread and
// restores: the capability sets and the parent-death signal (a change of
// effective uid clears it).
type threadCreds struct {
	hdr       unix.CapUserHeader
	caps      [2]unix.CapUserData
	pdeathsig int32
}

// wasDumpable is whether this process could dump core when it started: a
// change of ids makes it undumpable, and it is made dumpable again after.
var wasDumpable = sync.OnceValue(func() bool {
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	return err == nil && d == 1
})

// ownNamespacesAs makes the calling thread's effective uid uid, with its
// capabilities and root's file access kept, so that a user namespace it
// clones is owned by uid. The caller has locked the goroutine to its OS
// thread: every call here changes that thread only (raw system calls, not
// Go's, which change every thread of the process), and the Go runtime
// starts no thread from a locked one. It returns restore, which puts the
// thread back; if restore fails, the thread must never be unlocked (Go then
// ends it with its goroutine).
func ownNamespacesAs(uid int) (restore func() error, err error) {
	wasDumpable()
	saved := threadCreds{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}
	if err := unix.Capget(&saved.hdr, &saved.caps[0]); err != nil {
		return nil, fmt.Errorf("own user namespace: %w", os.NewSyscallError("capget", err))
	}
	if err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&saved.pdeathsig)), 0, 0, 0); err != nil {
		return nil, fmt.Errorf("own user namespace: %w", os.NewSyscallError("prctl(PR_GET_PDEATHSIG)", err))
	}
	restore = func() error { return saved.restore() }
	// The real and saved uids stay 0: the permitted set is kept, and the
	// effective uid can go back.
	if err := setresuid(-1, uid, -1); err != nil {
		return nil, fmt.Errorf("own user namespace as uid %d: %w", uid, err)
	}
	// Files are opened as root (the job's cgroup for CLONE_INTO_CGROUP),
	// and the effective set, cleared by the change, is as it was.
	_, _, _ = unix.RawSyscall(unix.SYS_SETFSUID, 0, 0, 0)
	if err := unix.Capset(&saved.hdr, &saved.caps[0]); err != nil {
		err = fmt.Errorf("own user namespace: %w", os.NewSyscallError("capset", err))
		if rerr := restore(); rerr != nil {
			return nil, errors.Join(err, rerr, errThreadTainted)
		}
		return nil, err
	}
	return restore, nil
}

// errThreadTainted says the calling thread could not be put back as it
// was: it must stay locked, so that it ends with its goroutine and never
// runs other goroutines with a job's uid.
var errThreadTainted = errors.New("the thread's credentials could not be restored")

// restore puts the calling thread's credentials back as they were saved.
func (c *threadCreds) restore() error {
	if err := setresuid(-1, 0, -1); err != nil {
		return fmt.Errorf("restore the supervisor's uid: %w", err)
	}
	hdr := c.hdr
	if err := unix.Capset(&hdr, &c.caps[0]); err != nil {
		return fmt.Errorf("restore the supervisor's capabilities: %w", os.NewSyscallError("capset", err))
	}
	if c.pdeathsig != 0 {
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(c.pdeathsig), 0, 0, 0); err != nil {
			return fmt.Errorf("restore the supervisor's parent-death signal: %w", os.NewSyscallError("prctl(PR_SET_PDEATHSIG)", err))
		}
	}
	// A change of effective uid made the process undumpable.
	if wasDumpable() {
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	}
	return nil
}

// setresuid changes the calling thread's uids only; -1 keeps one.
func setresuid(ruid, euid, suid int) error {
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(ruid), uintptr(euid), uintptr(suid)); errno != 0 {
		return os.NewSyscallError("setresuid", errno)
	}
	return nil
}
