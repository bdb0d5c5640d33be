//go:build cgo

package seccomp

import "golang.org/x/sys/unix"

// cloneNamespaceFlags are the CLONE_NEW* bits of clone(2)'s flags argument.
// CLONE_NEWTIME (0x80) is absent on purpose: in clone(2) that bit belongs to
// the exit signal, and new time namespaces come only from unshare/clone3.
var cloneNamespaceFlags = []uint64{
	unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
	unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
}

// deniedIoctls inject input into a terminal (TIOCSTI) or drive the console
// (TIOCLINUX): a classic sandbox escape through a shared tty.
var deniedIoctls = []uint64{unix.TIOCSTI, unix.TIOCLINUX}

// personalityQuery is personality(0xffffffff): it reads, never changes.
const personalityQuery = 0xffffffff
