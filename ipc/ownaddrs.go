package ipc

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// ownAddrsTTL bounds how stale the host's own addresses may be: an
// interface that comes up is counted as the host's within this time.
const ownAddrsTTL = 10 * time.Second

// own caches the addresses of this host's interfaces. A name that
// resolves to one of them reaches the daemon's host itself (a service
// listening on every interface), as loopback does, so such an address is
// private whatever its range.
var own struct {
	mu    sync.Mutex
	at    time.Time
	addrs map[netip.Addr]bool
}

// isOwnAddr reports whether a is an address of one of this host's
// interfaces. A failed read keeps the last set it read.
func isOwnAddr(a netip.Addr) bool {
	own.mu.Lock()
	defer own.mu.Unlock()
	if own.addrs == nil || time.Since(own.at) > ownAddrsTTL {
		if ifaddrs, err := net.InterfaceAddrs(); err == nil {
			set := make(map[netip.Addr]bool, len(ifaddrs))
			for _, ia := range ifaddrs {
				if n, ok := ia.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						set[ip.Unmap()] = true
					}
				}
			}
			own.addrs, own.at = set, time.Now()
		}
	}
	return own.addrs[a.Unmap().WithZone("")]
}
