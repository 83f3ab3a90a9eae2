// Package netblock is the one list of places that nothing Atelier connects
// to on someone's behalf may reach: the host itself, the networks behind it
// and the address ranges that are not the internet. The import check of git
// sources asks it about one address at a time (List.Check); the network
// filter of sandboxed commands writes the same list as nftables rules, which
// match prefixes (List.Rules). Both are computed from one List, and a test
// holds that they give the same answer for every address.
//
// The package imports nothing of Atelier's.
package netblock

import (
	"fmt"
	"net"
	"net/netip"
)

// blocked are the ranges that are never the internet, with what each is
// called in a refusal. IPv4 ranges are also refused in every IPv6 form that
// carries an IPv4 address to a gateway (see carriers); the IPv6 ranges below
// are refused whole.
var blocked = []zone{
	{netip.MustParsePrefix("0.0.0.0/8"), "an address of this network"}, // Linux connects 0.x to the host itself
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"}, // cloud metadata at 169.254.169.254
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a protocol assignment address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved or broadcast address"}, // 255.255.255.255 included

	// ::/96 holds the unspecified address ::, loopback ::1 and the
	// deprecated IPv4-compatible ::a.b.c.d, which nobody routes: refused
	// whole, as are the other forms no public host uses.
	{netip.MustParsePrefix("::/96"), "an unspecified, loopback or IPv4-compatible address"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "an IPv4-translated address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"}, // translated by a local gateway, to any address
	// Teredo carries a server's address and the client's, obfuscated, in
	// fields no prefix can match together; the service is all but gone, so
	// it is refused whole rather than judged by what it carries.
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("2001:2::/48"), "a benchmarking address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// loopback is what a sandbox never reaches, whatever the operator allows:
// its own loopback is its namespace's, and the host's must stay out.
var loopback = []zone{
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
}

// carrier is an IPv6 range whose addresses carry an IPv4 address at a fixed
// place, which a gateway (or the kernel, for a mapped address) connects to.
type carrier struct {
	prefix netip.Prefix // the range; its length is where the IPv4 address starts
	name   string
}

var carriers = []carrier{
	{netip.MustParsePrefix("::ffff:0:0/96"), "an IPv4-mapped address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address"},
}

// zone is a range and what it is called.
type zone struct {
	prefix netip.Prefix
	kind   string
}

// Config is what a List is made of.
type Config struct {
	// Allow are the operator's networks that may be reached although they
	// are on the list (ATELIER_IMPORT_ALLOW_CIDRS,
	// ATELIER_SANDBOX_ALLOW_CIDRS). An IPv4 network allows its IPv6 forms
	// too (see carriers).
	Allow []netip.Prefix
	// Host are the addresses of this machine's interfaces with the length of
	// the network each sits on, as Interfaces returns them: the addresses
	// and those networks (their gateways included) are refused.
	Host []netip.Prefix
	// ClosedLoopback refuses loopback even when Allow names it.
	ClosedLoopback bool
}

// A List is one decision about where a connection may go. Refusing comes
// in three steps, and the first that matches decides: loopback when it is
// closed; the operator's allowed networks; the blocked ranges and the host's
// addresses and networks. Anything else is the internet and is allowed.
type List struct {
	never, allow, block []zone
}

// New makes the List of c.
func New(c Config) *List {
	l := &List{block: append([]zone{}, blocked...)}
	if c.ClosedLoopback {
		l.never = loopback
	}
	for _, p := range c.Allow {
		if n, err := plain(p.Addr(), p.Bits()); err == nil {
			l.allow = append(l.allow, zone{prefix: n})
		}
	}
	// Own addresses first, so a refusal names the narrower reason.
	for _, p := range c.Host {
		a := p.Addr().Unmap().WithZone("")
		l.block = append(l.block, zone{netip.PrefixFrom(a, a.BitLen()), "an address of this server"})
	}
	for _, p := range c.Host {
		if n, err := plain(p.Addr().WithZone(""), p.Bits()); err == nil {
			l.block = append(l.block, zone{n, "an address on a network this server is attached to"})
		}
	}
	return l
}

// plain is the network of bits around a, an IPv4-mapped network written
// as the IPv4 network.
func plain(a netip.Addr, bits int) (netip.Prefix, error) {
	if a.Is4In6() {
		a, bits = a.Unmap(), max(bits-96, 0)
	}
	return a.Prefix(bits)
}

// Check says whether a connection to addr may be made and, when it may not,
// what addr is. An IPv6 address that carries an IPv4 address (mapped,
// NAT64, 6to4) is judged as itself and by the address it carries: it is
// allowed when either is allowed, and refused when either is refused. An
// address with a zone (fe80::1%eth0) is refused: it names an interface of
// this host.
func (l *List) Check(addr netip.Addr) (ok bool, kind string) {
	if addr.Zone() != "" {
		return false, "a scoped address"
	}
	if kind, in := find(l.never, addr); in {
		return false, kind
	}
	if _, in := find(l.allow, addr); in {
		return true, ""
	}
	if kind, in := find(l.block, addr); in {
		return false, kind
	}
	return true, ""
}

// find says whether addr, or the IPv4 address it carries, lies in one of
// zs, and what that makes it.
func find(zs []zone, addr netip.Addr) (kind string, in bool) {
	for _, z := range zs {
		if z.prefix.Contains(addr) {
			return z.kind, true
		}
	}
	inner, via, carried := carriedBy(addr)
	if !carried {
		return "", false
	}
	for _, z := range zs {
		if z.prefix.Contains(inner) {
			return z.kind + " (as " + via + ")", true
		}
	}
	return "", false
}

// carriedBy returns the IPv4 address addr carries and the name of the form
// that carries it.
func carriedBy(addr netip.Addr) (inner netip.Addr, via string, ok bool) {
	if !addr.Is6() {
		return netip.Addr{}, "", false
	}
	b := addr.As16()
	for _, c := range carriers {
		if c.prefix.Contains(addr) {
			at := c.prefix.Bits() / 8
			return netip.AddrFrom4([4]byte(b[at : at+4])), c.name, true
		}
	}
	return netip.Addr{}, "", false
}

// Rule is one line of the list as prefixes: a destination in Prefix is
// refused, or allowed when Allow.
type Rule struct {
	Prefix netip.Prefix
	Allow  bool
}

// Rules is the List as prefixes, for a filter that matches destinations in
// order and lets the first matching rule decide, and allows what none
// matches. Every IPv4 prefix comes with its forms inside each carrier (for
// 10.0.0.0/8: ::ffff:10.0.0.0/104, 64:ff9b::10.0.0.0/104, 2002:a00::/24),
// so the rules decide exactly as Check does for every address without a
// zone. A rule no address could reach (inside an earlier one, or inside
// another of its own step) is left out.
func (l *List) Rules() []Rule {
	var rules []Rule
	for _, step := range []struct {
		zs    []zone
		allow bool
	}{{l.never, false}, {l.allow, true}, {l.block, false}} {
		var ps []netip.Prefix
		for _, z := range step.zs {
			ps = append(ps, z.prefix)
			if z.prefix.Addr().Is4() {
				for _, c := range carriers {
					ps = append(ps, inside(c, z.prefix))
				}
			}
		}
		earlier := len(rules)
		for i, p := range ps {
			held := false
			for _, r := range rules[:earlier] {
				held = held || holds(r.Prefix, p)
			}
			for j, q := range ps {
				// Of two equal prefixes the first stays.
				held = held || i != j && holds(q, p) && (q.Bits() < p.Bits() || j < i)
			}
			if !held {
				rules = append(rules, Rule{Prefix: p, Allow: step.allow})
			}
		}
	}
	return rules
}

// holds says whether every address of p is in q; both are masked.
func holds(q, p netip.Prefix) bool {
	return q.Bits() <= p.Bits() && q.Contains(p.Addr())
}

// inside is the IPv6 prefix of the addresses of carrier c that carry an
// address of the IPv4 prefix p.
func inside(c carrier, p netip.Prefix) netip.Prefix {
	b := c.prefix.Addr().As16()
	at := c.prefix.Bits() / 8
	v4 := p.Masked().Addr().As4()
	copy(b[at:], v4[:])
	return netip.PrefixFrom(netip.AddrFrom16(b), c.prefix.Bits()+p.Bits())
}

// Interfaces returns the addresses of this machine's interfaces now, each
// with the length of its network, for Config.Host. They change (DHCP, VPNs,
// containers), so they are read for each use rather than once.
func Interfaces() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("netblock: the host's addresses: %w", err)
	}
	var ps []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		// Go gives an IPv4 address in 16 bytes with a 4-byte mask.
		ip = ip.Unmap()
		ones, bits := n.Mask.Size()
		switch {
		case bits == ip.BitLen():
		case bits == 128 && ip.Is4() && ones >= 96:
			ones -= 96
		default:
			ones = ip.BitLen() // no mask that fits: the address alone
		}
		ps = append(ps, netip.PrefixFrom(ip, ones))
	}
	return ps, nil
}
