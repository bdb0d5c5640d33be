package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a connection, as the kernel saw
// it when it connected (SO_PEERCRED, SO_PEERGROUPS): a group the process
// joins or leaves later does not change it.
type Peer struct {
	PID    int32
	UID    uint32
	GID    uint32
	Groups []uint32
	// Err says why the credentials could not be read; such a peer is
	// refused.
	Err error
	// GroupsErr says why the supplementary groups could not be read; such
	// a peer is refused when a tenant matches by group (tenantFor).
	GroupsErr error
}

type peerKey struct{}

// connContext records the peer of each new connection, for the handlers.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, readPeer(c))
}

// peerFrom returns the connection's peer.
func peerFrom(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	if p == nil {
		return &Peer{Err: fmt.Errorf("no peer credentials")}
	}
	return p
}

func readPeer(c net.Conn) *Peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return &Peer{Err: fmt.Errorf("not a Unix socket connection (%T)", c)}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return &Peer{Err: err}
	}
	p := &Peer{}
	cerr := raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			p.Err = os.NewSyscallError("getsockopt SO_PEERCRED", err)
			return
		}
		p.PID, p.UID, p.GID = cred.Pid, cred.Uid, cred.Gid
		// Supplementary groups matter: an operator grants access, and
		// picks a tenant, by adding users to a group. Without them
		// (kernels before 4.13 lack SO_PEERGROUPS) the allow list counts
		// the primary group only, and a peer that a tenant might match
		// by group is refused rather than put in others.
		p.Groups, p.GroupsErr = peerGroups(int(fd))
	})
	if cerr != nil {
		return &Peer{Err: cerr}
	}
	return p
}

// peerGroups reads SO_PEERGROUPS, which x/sys has no wrapper for.
func peerGroups(fd int) ([]uint32, error) {
	n := 64
	for range 3 {
		buf := make([]uint32, n)
		size := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch errno {
		case 0:
			return buf[:size/4], nil
		case unix.ERANGE:
			n = int(size/4) + 1
			continue
		default:
			return nil, os.NewSyscallError("getsockopt SO_PEERGROUPS", errno)
		}
	}
	return nil, os.NewSyscallError("getsockopt SO_PEERGROUPS", unix.ERANGE)
}

// self reports whether the peer is the daemon's own uid.
func (p *Peer) self() bool {
	return p.Err == nil && p.UID == uint32(os.Geteuid())
}

// allowed reports whether the peer may use the API.
func (s peerSet) allowed(p *Peer) bool {
	if p.Err != nil {
		return false
	}
	if s.uids[p.UID] || s.gids[p.GID] {
		return true
	}
	for _, g := range p.Groups {
		if s.gids[g] {
			return true
		}
	}
	return false
}
