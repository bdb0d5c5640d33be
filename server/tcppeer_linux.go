package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

// tcpPeerUID returns the uid that owns the local TCP socket at peer,
// connected to local: the connecting process's, for a connection from
// this host (NETLINK_SOCK_DIAG, asking the kernel for the one socket of
// that address pair, not a listing of every socket). An error when the
// kernel cannot say (no inet_diag for TCP, the peer already gone, or a
// peer on another host, whose socket the kernel does not have).
//
// The query is the kernel's exact look-up of the four-tuple, not a dump:
// netlink.SocketGet dumps filtered by ports alone, so a peer holding a
// second connection of the same ports from another loopback address
// would make its uid untellable, and so escape the per-peer cap.
//
// The look-up names a device (idiag_if): the kernel matches a socket
// bound to a device (SO_BINDTODEVICE, which any user may set on a socket
// of its own; a connection to a link-local address binds it to the
// address's zone) only to a look-up of that device, and one bound to
// none to any. With no device named, a peer that bound its sockets to
// "lo" made every one of them untellable, each a peer of its own, and so
// took every connection of the listener
// (TestMetricsListenerPerPeerBoundToLoopback); one that bound them to
// eth0 and connected to the host's addresses on it was each address's
// remote peer (TestMetricsListenerPerPeerOverLocalAddresses). The
// loopback device is asked first, which matches the sockets bound to
// none as well, then, for a peer at one of the host's addresses (a
// socket bound to a device connects to the addresses that device
// holds), each other device of the host, while the kernel finds no such
// socket. A peer on another host costs one look-up and a listing of the
// host's addresses, not one look-up per device.
func tcpPeerUID(local, peer *net.TCPAddr) (uint32, error) {
	uid, err := sockDiagUID(local, peer, loopbackIndex())
	if !errors.Is(err, syscall.ENOENT) || !peer.IP.IsLoopback() && !hostAddress(peer.IP) {
		return uid, err
	}
	ifs, ierr := net.Interfaces()
	if ierr != nil {
		return 0, err
	}
	for _, i := range ifs {
		if uint32(i.Index) == loopbackIndex() {
			continue
		}
		if uid, err = sockDiagUID(local, peer, uint32(i.Index)); !errors.Is(err, syscall.ENOENT) {
			return uid, err
		}
	}
	return 0, err
}

// hostAddress reports whether ip is one of the host's addresses.
func hostAddress(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // ask every device
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// sockDiagUID is tcpPeerUID's look-up on device dif.
func sockDiagUID(local, peer *net.TCPAddr, dif uint32) (uint32, error) {
	family := syscall.AF_INET6
	if peer.IP.To4() != nil && local.IP.To4() != nil {
		family = syscall.AF_INET
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, sockDiagProtocol)
	if err != nil {
		return 0, os.NewSyscallError("socket NETLINK_SOCK_DIAG", err)
	}
	defer syscall.Close(fd)
	// struct nlmsghdr, then struct inet_diag_req_v2 (linux/inet_diag.h):
	// family, protocol, ext, pad, states, then the socket's id, seen
	// from the peer: its own address first.
	const hdrLen, reqLen = syscall.NLMSG_HDRLEN, 56
	b := make([]byte, hdrLen+reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], sockDiagByFamily)
	ne.PutUint16(b[6:], syscall.NLM_F_REQUEST)
	r := b[hdrLen:]
	r[0], r[1] = byte(family), syscall.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	binary.BigEndian.PutUint16(r[8:], uint16(peer.Port))
	binary.BigEndian.PutUint16(r[10:], uint16(local.Port))
	putDiagAddr(r[12:28], peer.IP, family)
	putDiagAddr(r[28:44], local.IP, family)
	ne.PutUint32(r[44:], dif)
	ne.PutUint32(r[48:], ^uint32(0)) // no cookie
	ne.PutUint32(r[52:], ^uint32(0))
	if err := syscall.Sendto(fd, b, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, os.NewSyscallError("sendto NETLINK_SOCK_DIAG", err)
	}
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, os.NewSyscallError("recvfrom NETLINK_SOCK_DIAG", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 {
		return 0, fmt.Errorf("sock_diag: an answer that does not parse (%d bytes): %v", n, err)
	}
	m := msgs[0]
	switch {
	case m.Header.Type == syscall.NLMSG_ERROR && len(m.Data) >= 4:
		if errno := -int32(ne.Uint32(m.Data)); errno != 0 {
			return 0, os.NewSyscallError("sock_diag", syscall.Errno(errno))
		}
		return 0, errors.New("sock_diag: no socket in the answer")
	case m.Header.Type != sockDiagByFamily || len(m.Data) < 72:
		return 0, fmt.Errorf("sock_diag: an answer of type %d, %d bytes", m.Header.Type, len(m.Data))
	}
	// struct inet_diag_msg: family, state, timer, retrans, id (48),
	// expires, rqueue, wqueue, then uid.
	return ne.Uint32(m.Data[64:]), nil
}

// loopbackIndex is the index of the loopback device of the daemon's
// network namespace (1 in every namespace the kernel makes), or 0, no
// device, if none is found: a look-up of no device still finds the
// sockets bound to none.
var loopbackIndex = sync.OnceValue(func() uint32 {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			return uint32(i.Index)
		}
	}
	return 0
})

// The netlink values syscall lacks (linux/netlink.h, linux/sock_diag.h).
const (
	sockDiagProtocol = 4  // NETLINK_SOCK_DIAG
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
)

// putDiagAddr writes ip as inet_diag_sockid holds it: 4 bytes for
// AF_INET, 16 for AF_INET6.
func putDiagAddr(dst []byte, ip net.IP, family int) {
	if family == syscall.AF_INET {
		copy(dst, ip.To4())
		return
	}
	copy(dst, ip.To16())
}
