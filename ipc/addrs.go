package ipc

import "net/netip"

// addrClass says why an address is not an ordinary public one. The classes
// are ordered: a higher one is more dangerous to reach.
type addrClass int

const (
	addrPublic addrClass = iota
	// addrPrivate: loopback, RFC 1918, ULA, site-local, IPv6 link-local,
	// CGNAT, and any address of this host's own interfaces. Reachable through an origin the operator names in
	// Ceiling.PrivateOrigins, or with AllowPrivateAddresses.
	addrPrivate
	// addrForbidden: IPv4 link-local (where clouds put their metadata and
	// credential endpoints) and the other cloud endpoints, unspecified,
	// multicast, broadcast and reserved ranges. Reachable only with
	// AllowPrivateAddresses.
	addrForbidden
)

var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("168.63.129.16"),      // Azure's wire server
		netip.MustParseAddr("100.100.100.200"),    // Alibaba Cloud
		netip.MustParseAddr("fd20:ce::254"),       // GCP over IPv6
		netip.MustParseAddr("fd00:c1::a9fe:a9fe"), // Oracle Cloud over IPv6
	}
	privatePrefixes = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"), // CGNAT
		netip.MustParsePrefix("fc00::/7"),      // ULA
		netip.MustParsePrefix("fec0::/10"),     // site-local: deprecated, still routed by some
	}
	forbiddenPrefixes = []netip.Prefix{
		// IPv4 link-local: AWS, GCP, Azure, OpenStack, Oracle and others
		// serve metadata and credentials at 169.254.169.254, ECS at
		// 169.254.170.2, and clouds add more in this range.
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fd00:ec2::/32"), // AWS metadata, ECS and time over IPv6
		netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
		netip.MustParsePrefix("240.0.0.0/4"),   // reserved, and broadcast
		netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments (Oracle's metadata too)
		netip.MustParsePrefix("192.0.2.0/24"),  // documentation
		netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
		netip.MustParsePrefix("100::/64"),      // discard
		netip.MustParsePrefix("2001:db8::/32"), // documentation
		netip.MustParsePrefix("3fff::/20"),     // documentation (RFC 9637)
		netip.MustParsePrefix("2001:2::/48"),   // benchmarking
	}
	// IPv6 forms that carry an IPv4 address the packet may end up at.
	ipv4Compatible  = netip.MustParsePrefix("::/96")
	ipv4Translated  = netip.MustParsePrefix("::ffff:0:0:0/96")
	nat64Prefix     = netip.MustParsePrefix("64:ff9b::/96")
	nat64LocalUse   = netip.MustParsePrefix("64:ff9b:1::/48")
	teredoPrefix    = netip.MustParsePrefix("2001::/32")
	sixToFourPrefix = netip.MustParsePrefix("2002::/16")
)

// classify sorts an address into public, private or forbidden, looking
// through every IPv6 form that carries an IPv4 address: mapped, compatible,
// translated, NAT64, 6to4 and Teredo.
func classify(a netip.Addr) addrClass {
	a = a.Unmap().WithZone("")
	if !a.Is6() {
		return classifyPlain(a)
	}
	b := a.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte(b[i : i+4])) }
	switch {
	case a.IsUnspecified(), a.IsLoopback():
		return classifyPlain(a)
	case ipv4Compatible.Contains(a), ipv4Translated.Contains(a), nat64Prefix.Contains(a):
		return classify(v4(12))
	case nat64LocalUse.Contains(a):
		// Where the IPv4 address sits depends on the operator's prefix
		// length, and the translator is on their network: never public.
		return max(addrPrivate, classify(v4(12)))
	case sixToFourPrefix.Contains(a):
		return classify(v4(2))
	case teredoPrefix.Contains(a):
		// The server's address in the clear, the client's inverted.
		client := netip.AddrFrom4([4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff})
		return max(classify(v4(4)), classify(client))
	}
	return classifyPlain(a)
}

// classifyPlain classifies an address taken as it is.
func classifyPlain(a netip.Addr) addrClass {
	for _, m := range metadataAddrs {
		if a == m {
			return addrForbidden
		}
	}
	switch {
	case !a.IsValid(), a.IsUnspecified(), a.IsMulticast(), a.IsInterfaceLocalMulticast(), a.IsLinkLocalMulticast():
		return addrForbidden
	}
	for _, p := range forbiddenPrefixes {
		if p.Contains(a) {
			return addrForbidden
		}
	}
	if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsPrivate() || isOwnAddr(a) {
		return addrPrivate
	}
	for _, p := range privatePrefixes {
		if p.Contains(a) {
			return addrPrivate
		}
	}
	return addrPublic
}

// addrAllowed applies the address rules: named says the operator named the
// origin as one that may reach a private address (Ceiling.PrivateOrigins,
// or the CLI's own declared literal).
func addrAllowed(a netip.Addr, named, allowPrivate bool) bool {
	switch classify(a) {
	case addrPublic:
		return true
	case addrPrivate:
		return named || allowPrivate
	default:
		return allowPrivate
	}
}
