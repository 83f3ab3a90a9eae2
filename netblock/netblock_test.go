package netblock

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// testConfig is a host on a public network, with loopback and link-local
// interfaces, and an operator who allows a private network, a unique local
// one and loopback.
func testConfig(closed bool) Config {
	return Config{
		Allow: []netip.Prefix{
			netip.MustParsePrefix("10.9.0.0/16"),
			netip.MustParsePrefix("fd12::/16"),
			netip.MustParsePrefix("127.0.0.0/8"),
			netip.MustParsePrefix("::ffff:172.20.0.0/112"), // mapped: the same as 172.20.0.0/16
		},
		Host: []netip.Prefix{
			netip.MustParsePrefix("127.0.0.1/8"),
			netip.MustParsePrefix("::1/128"),
			netip.MustParsePrefix("192.88.99.7/24"),
			netip.MustParsePrefix("2a00:1450:4001:81c::7/64"),
			netip.MustParsePrefix("fe80::1/64"),
			netip.MustParsePrefix("::ffff:45.33.32.156/120"), // as 16 bytes: 45.33.32.0/24
		},
		ClosedLoopback: closed,
	}
}

// verdict is what a filter that applies rules in order decides for addr.
func verdict(rules []Rule, addr netip.Addr) bool {
	for _, r := range rules {
		if r.Prefix.Contains(addr) {
			return r.Allow
		}
	}
	return true
}

// probes are addresses at and around every edge the list has: the first
// and last address of each prefix it is made of or writes as a rule, one
// step outside each, one inside, and each IPv4 one in every form that
// carries it; then random addresses, and random ones in each carrier.
func probes(l *List) []netip.Addr {
	var ps []netip.Prefix
	for _, zs := range [][]zone{l.never, l.allow, l.block} {
		for _, z := range zs {
			ps = append(ps, z.prefix)
		}
	}
	for _, r := range l.Rules() {
		ps = append(ps, r.Prefix)
	}
	for _, c := range carriers {
		ps = append(ps, c.prefix)
	}
	var as []netip.Addr
	for _, p := range ps {
		first, last := p.Masked().Addr(), lastOf(p)
		as = append(as, first, last, first.Next(), last.Prev(), first.Prev(), last.Next())
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b4 [4]byte
		var b16 [16]byte
		for i := range b4 {
			b4[i] = byte(rnd.Uint32())
		}
		for i := range b16 {
			b16[i] = byte(rnd.Uint32())
		}
		as = append(as, netip.AddrFrom4(b4), netip.AddrFrom16(b16))
		for _, c := range carriers {
			// Random within the carrier, and random after its IPv4 part.
			b := c.prefix.Addr().As16()
			at := c.prefix.Bits() / 8
			copy(b[at:], b16[at:])
			as = append(as, netip.AddrFrom16(b))
		}
	}
	var out []netip.Addr
	for _, a := range as {
		if !a.IsValid() {
			continue
		}
		out = append(out, a)
		if a.Is4() {
			for _, c := range carriers {
				p := inside(c, netip.PrefixFrom(a, 32))
				out = append(out, p.Addr(), lastOf(p))
			}
		}
	}
	return out
}

func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestRulesDecideAsCheck: the prefixes a filter is given refuse exactly
// the addresses Check refuses, with the loopback closed (the sandbox) and
// open (imports).
func TestRulesDecideAsCheck(t *testing.T) {
	for _, closed := range []bool{false, true} {
		l := New(testConfig(closed))
		rules := l.Rules()
		refused, disagree := 0, 0
		for _, a := range probes(l) {
			ok, kind := l.Check(a)
			if got := verdict(rules, a); got != ok {
				t.Errorf("closed loopback %v: %s: Check says %v (%s), the rules %v", closed, a, ok, kind, got)
				if disagree++; disagree == 20 {
					t.Fatal("and more")
				}
			}
			if !ok {
				refused++
				if kind == "" {
					t.Errorf("%s is refused without saying why", a)
				}
			}
		}
		if refused == 0 {
			t.Fatal("no probe was refused: the test proves nothing")
		}
	}
}

// TestRulesHoldEveryForm: the rules name the forms a filter could not
// otherwise see, and leave out what another rule of the same step holds.
func TestRulesHoldEveryForm(t *testing.T) {
	rules := New(testConfig(true)).Rules()
	has := map[Rule]bool{}
	for _, r := range rules {
		if has[r] {
			t.Errorf("rule %v twice", r)
		}
		has[r] = true
	}
	for _, want := range []Rule{
		{netip.MustParsePrefix("127.0.0.0/8"), false},
		{netip.MustParsePrefix("::ffff:127.0.0.0/104"), false},
		{netip.MustParsePrefix("10.9.0.0/16"), true},
		{netip.MustParsePrefix("64:ff9b::a09:0/112"), true},
		{netip.MustParsePrefix("172.20.0.0/16"), true},
		{netip.MustParsePrefix("10.0.0.0/8"), false},
		{netip.MustParsePrefix("::ffff:10.0.0.0/104"), false},
		{netip.MustParsePrefix("64:ff9b::a00:0/104"), false},
		{netip.MustParsePrefix("2002:a00::/24"), false},
		{netip.MustParsePrefix("198.18.0.0/15"), false},
		{netip.MustParsePrefix("240.0.0.0/4"), false},
		{netip.MustParsePrefix("2002:f000::/20"), false},
		{netip.MustParsePrefix("192.88.99.0/24"), false},
		{netip.MustParsePrefix("2002:c058:6300::/40"), false},
		{netip.MustParsePrefix("45.33.32.0/24"), false},
		{netip.MustParsePrefix("2a00:1450:4001:81c::/64"), false},
		{netip.MustParsePrefix("::ffff:0:0:0/96"), false},
		{netip.MustParsePrefix("2001::/32"), false},
	} {
		if !has[want] {
			t.Errorf("no rule %v", want)
		}
	}
	// Own addresses lie on their networks, link-local networks inside
	// fe80::/10, and loopback is refused before the operator's allowance.
	for _, absent := range []Rule{
		{netip.MustParsePrefix("192.88.99.7/32"), false},
		{netip.MustParsePrefix("2a00:1450:4001:81c::7/128"), false},
		{netip.MustParsePrefix("fe80::/64"), false},
		{netip.MustParsePrefix("127.0.0.0/8"), true},
		{netip.MustParsePrefix("::ffff:127.0.0.0/104"), true},
	} {
		if has[absent] {
			t.Errorf("rule %v is held by an earlier one", absent)
		}
	}
}

// TestCheck: what the list says of each kind of place, with the loopback
// closed and open.
func TestCheck(t *testing.T) {
	tests := []struct {
		addr          string
		open, sandbox bool
	}{
		{"93.184.215.14", true, true},
		{"2606:4700::6810:84e5", true, true},
		{"64:ff9b::5db8:d70e", true, true},
		{"2002:5db8:d70e::1", true, true},
		{"::ffff:93.184.215.14", true, true},
		{"127.0.0.1", true, false},
		{"::1", false, false}, // ::/96 is not allowed by 127.0.0.0/8
		{"::ffff:127.0.0.1", true, false},
		{"64:ff9b::7f00:1", true, false},
		{"10.9.3.4", true, true},
		{"2002:a09:304::", true, true},
		{"10.10.0.1", false, false},
		{"172.20.1.1", true, true},
		{"172.21.1.1", false, false},
		{"fd12::1", true, true},
		{"fd13::1", false, false},
		{"192.88.99.7", false, false},
		{"192.88.99.1", false, false},
		{"192.88.98.1", true, true},
		{"45.33.32.1", false, false},
		{"2a00:1450:4001:81c::1", false, false},
		{"2a00:1450:4001:81d::1", true, true},
		{"fe80::1%eth0", false, false},
	}
	open, sandbox := New(testConfig(false)), New(testConfig(true))
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		if ok, kind := open.Check(a); ok != tt.open {
			t.Errorf("open loopback: Check(%s) = %v (%s), want %v", a, ok, kind, tt.open)
		}
		if ok, kind := sandbox.Check(a); ok != tt.sandbox {
			t.Errorf("closed loopback: Check(%s) = %v (%s), want %v", a, ok, kind, tt.sandbox)
		}
	}
}

// TestInterfaces: this machine's loopback is among its interfaces, with the
// length of its network, as an IPv4 address.
func TestInterfaces(t *testing.T) {
	ps, err := Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p == netip.MustParsePrefix("127.0.0.1/8") {
			return
		}
	}
	t.Errorf("127.0.0.1/8 is not among %v", ps)
}
