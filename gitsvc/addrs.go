package gitsvc

import (
	"fmt"
	"net"
	"net/netip"
)

// notPublic are the networks a fetch for someone other than a site admin
// must not reach: the server itself, the networks behind it, and addresses
// that stand for those (a NAT64 or 6to4 address is judged by the IPv4
// address it carries, in addressAllowed).
var notPublic = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an address of this network"}, // Linux connects 0.x to the host itself
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a protocol assignment address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"}, // and the broadcast address
	{netip.MustParsePrefix("::/96"), "an unspecified, loopback or IPv4-compatible address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local NAT64 address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// addressAllowed says whether a fetch for someone other than a site admin
// may connect to addr: an address in allow always may; otherwise one on a
// network in notPublic or one of the server's own addresses (own) may not,
// and kind says what it is.
func addressAllowed(addr netip.Addr, allow []netip.Prefix, own []netip.Addr) (ok bool, kind string) {
	addr = addr.Unmap()
	if addr.Zone() != "" {
		return false, "a scoped address"
	}
	for _, p := range allow {
		if p.Contains(addr) {
			return true, ""
		}
	}
	for _, n := range notPublic {
		if n.prefix.Contains(addr) {
			return false, n.kind
		}
	}
	for _, o := range own {
		if o.Unmap() == addr {
			return false, "an address of this server"
		}
	}
	// Addresses that carry an IPv4 address reach it through a gateway.
	b := addr.As16()
	switch {
	case nat64.Contains(addr):
		return addressAllowed(netip.AddrFrom4([4]byte(b[12:16])), allow, own)
	case sixToFour.Contains(addr):
		return addressAllowed(netip.AddrFrom4([4]byte(b[2:6])), allow, own)
	}
	return true, ""
}

// ownAddresses are the addresses of this machine's interfaces now: a
// public address of the server reaches the services it listens on.
func ownAddresses() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("gitsvc: the server's own addresses: %w", err)
	}
	var own []netip.Addr
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok {
			if addr, ok := netip.AddrFromSlice(n.IP); ok {
				own = append(own, addr.Unmap())
			}
		}
	}
	return own, nil
}
