package ipc

import (
	"context"
	"net/netip"
)

// Resolver turns a host name into addresses. *net.Resolver satisfies it;
// tests inject their own to make a name resolve where they need.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ResolverFunc adapts a function to Resolver (the network is always "ip").
type ResolverFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// LookupNetIP implements Resolver.
func (f ResolverFunc) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	return f(ctx, host)
}
