package ipc

import "net/netip"

// addrClass says why an address is not an ordinary public one.
type addrClass int

const (
	addrPublic addrClass = iota
	// addrPrivate: loopback, RFC 1918, ULA, link-local, CGNAT. Reachable
	// through a declared literal IP origin or with AllowPrivateAddresses.
	addrPrivate
	// addrForbidden: cloud metadata, unspecified, multicast, broadcast and
	// reserved ranges. Reachable only with AllowPrivateAddresses.
	addrForbidden
)

var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack…
		netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
	privatePrefixes = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"), // CGNAT
		netip.MustParsePrefix("fc00::/7"),      // ULA
	}
	forbiddenPrefixes = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),   // "this network"
		netip.MustParsePrefix("240.0.0.0/4"), // reserved, and broadcast
		netip.MustParsePrefix("192.0.0.0/24"),
		netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
	}
	// IPv6 forms that embed an IPv4 address the packet may end up at.
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// classify sorts an address into public, private or forbidden, looking
// through IPv4-mapped, NAT64 and 6to4 wrappings.
func classify(a netip.Addr) addrClass {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64Prefix.Contains(a):
			return classify(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(a):
			return classify(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	for _, m := range metadataAddrs {
		if a == m {
			return addrForbidden
		}
	}
	switch {
	case !a.IsValid(), a.IsUnspecified(), a.IsMulticast(), a.IsInterfaceLocalMulticast(), a.IsLinkLocalMulticast():
		return addrForbidden
	case a.IsLoopback(), a.IsLinkLocalUnicast(), a.IsPrivate():
		return addrPrivate
	}
	for _, p := range forbiddenPrefixes {
		if p.Contains(a) {
			return addrForbidden
		}
	}
	for _, p := range privatePrefixes {
		if p.Contains(a) {
			return addrPrivate
		}
	}
	return addrPublic
}

// addrAllowed applies the address rules: literal says the URL's host was this
// address itself (so it matched a declared literal origin).
func addrAllowed(a netip.Addr, literal, allowPrivate bool) bool {
	switch classify(a) {
	case addrPublic:
		return true
	case addrPrivate:
		return literal || allowPrivate
	default:
		return allowPrivate
	}
}
