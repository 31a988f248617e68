package gateway

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// noLocal is a host with no addresses of its own beyond the ranges the table denies anyway.
func noLocal() []netip.Prefix { return nil }

func TestAddrPolicyCheck(t *testing.T) {
	hostLocal := func() []netip.Prefix {
		return []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32"), netip.MustParsePrefix("2001:db8::7/128")}
	}
	tests := []struct {
		addr  string
		allow []string
		rule  string // "" = allowed; else a substring of the rule
	}{
		{addr: "1.1.1.1"},
		{addr: "93.184.216.34"},
		{addr: "2606:4700::1111"},
		{addr: "203.0.113.8"}, // the host's neighbour, not the host
		{addr: "127.0.0.1", rule: "loopback"},
		{addr: "127.255.0.9", rule: "loopback"},
		{addr: "::1", rule: "loopback"},
		{addr: "10.0.0.1", rule: "private address (RFC 1918)"},
		{addr: "172.16.0.1", rule: "RFC 1918"},
		{addr: "172.31.255.255", rule: "RFC 1918"},
		{addr: "172.32.0.1"},
		{addr: "192.168.1.1", rule: "RFC 1918"},
		{addr: "169.254.169.254", rule: "cloud metadata"},
		{addr: "169.254.1.1", rule: "link-local"},
		{addr: "fe80::1", rule: "link-local"},
		{addr: "fe80::1%eth0", rule: "link-local"},
		{addr: "100.64.0.1", rule: "CGNAT"},
		{addr: "100.127.255.255", rule: "CGNAT"},
		{addr: "100.128.0.1"},
		{addr: "fd12:3456::1", rule: "unique local"},
		{addr: "fc00::1", rule: "unique local"},
		{addr: "fd00:ec2::254", rule: "cloud metadata"},
		{addr: "0.0.0.0", rule: "this-network"},
		{addr: "0.1.2.3", rule: "this-network"},
		{addr: "::", rule: "unspecified"},
		{addr: "224.0.0.1", rule: "multicast"},
		{addr: "239.255.255.250", rule: "multicast"},
		{addr: "ff02::1", rule: "multicast"},
		{addr: "255.255.255.255", rule: "broadcast"},
		{addr: "240.0.0.1", rule: "reserved"},
		{addr: "198.18.0.1", rule: "198.18.0.0/15"},
		{addr: "198.19.255.255", rule: "198.18.0.0/15"},
		{addr: "198.20.0.1"},
		{addr: "::ffff:127.0.0.1", rule: "loopback"},
		{addr: "::ffff:10.1.2.3", rule: "RFC 1918"},
		{addr: "::ffff:169.254.169.254", rule: "cloud metadata"},
		{addr: "::ffff:1.1.1.1"},
		{addr: "::127.0.0.1", rule: "IPv4-compatible"},
		{addr: "64:ff9b::127.0.0.1", rule: "embedding 127.0.0.1, a loopback address"},
		{addr: "64:ff9b::a9fe:a9fe", rule: "embedding 169.254.169.254, the cloud metadata"},
		{addr: "64:ff9b::10.0.0.1", rule: "RFC 1918"},
		{addr: "64:ff9b::1.1.1.1"},
		// RFC 8215's local-use prefix: the IPv4 address each layout its translator may use
		// would carry; 1.1.1.1 read as /96, 10.0.0.1 read as /64.
		{addr: "64:ff9b:1::1", rule: "embedding 0.0.0.1, a this-network"},
		{addr: "64:ff9b:1::101:101"},
		{addr: "64:ff9b:1:abcd::101:101"},
		{addr: "64:ff9b:1::a00:1", rule: "embedding 10.0.0.1, a private address"},
		{addr: "64:ff9b:1::7f00:1", rule: "embedding 127.0.0.1, a loopback address"},
		{addr: "64:ff9b:1:0:a:0:100:0", rule: "embedding 10.0.0.1, a private address"},
		{addr: "64:ff9b:1:0:a9:fea9:fe00:0", rule: "embedding"},
		{addr: "2002:0a00:0001::1", rule: "embedding 10.0.0.1"},
		{addr: "2002:0101:0101::1"},
		{addr: "203.0.113.7", rule: "this host"},
		{addr: "::ffff:203.0.113.7", rule: "this host"},
		{addr: "64:ff9b::203.0.113.7", rule: "this host"},
		{addr: "2001:db8::7", rule: "this host"},

		{addr: "10.0.0.1", allow: []string{"10.0.0.0/8"}},
		{addr: "10.0.0.1", allow: []string{"10.0.1.0/24"}, rule: "RFC 1918"},
		{addr: "::ffff:10.0.0.1", allow: []string{"10.0.0.0/8"}},
		{addr: "10.0.0.1", allow: []string{"::ffff:10.0.0.0/104"}},
		{addr: "64:ff9b::10.0.0.1", allow: []string{"10.0.0.0/8"}},
		{addr: "127.0.0.1", allow: []string{"127.0.0.1/32"}},
		{addr: "169.254.169.254", allow: []string{"169.254.0.0/16"}},
		{addr: "203.0.113.7", allow: []string{"203.0.113.0/24"}, rule: "this host"}, // the host itself stays refused
		{addr: "fd00::5", allow: []string{"fd00::/8"}},
		// An allowed IPv6 range does not open an IPv4 address through a translator.
		{addr: "64:ff9b::10.0.0.1", allow: []string{"64:ff9b::/96"}, rule: "embedding 10.0.0.1, a private address"},
		{addr: "2002:7f00:1::1", allow: []string{"2002::/16"}, rule: "embedding 127.0.0.1, a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.addr+"/"+strings.Join(tt.allow, ","), func(t *testing.T) {
			p := &AddrPolicy{Local: hostLocal}
			for _, s := range tt.allow {
				p.Allow = append(p.Allow, netip.MustParsePrefix(s))
			}
			err := p.Check(netip.MustParseAddr(tt.addr))
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed", tt.addr, err)
				}
				return
			}
			var d *Denied
			if !errors.As(err, &d) {
				t.Fatalf("Check(%s) = %v, want *Denied", tt.addr, err)
			}
			if !strings.Contains(d.Error(), tt.rule) {
				t.Fatalf("Check(%s) = %q, want it to mention %q", tt.addr, d.Error(), tt.rule)
			}
			if !strings.HasPrefix(d.Error(), d.Addr.String()+" is ") {
				t.Fatalf("Check(%s) error %q does not start with the address", tt.addr, d.Error())
			}
		})
	}
}

func TestAddrPolicyNilAndInvalid(t *testing.T) {
	var p *AddrPolicy
	if err := p.Check(netip.MustParseAddr("10.0.0.1")); err == nil {
		t.Fatal("a nil policy allowed 10.0.0.1")
	}
	if err := p.Check(netip.Addr{}); err == nil {
		t.Fatal("a nil policy allowed the zero address")
	}
}

// TestAddrPolicyHostAddrs checks the default Local: the host's own addresses, which include
// 127.0.0.1 here and whatever else its interfaces carry.
func TestAddrPolicyHostAddrs(t *testing.T) {
	list, err := hostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 {
		t.Fatal("the host has no interface addresses")
	}
	p := &AddrPolicy{}
	for _, pf := range list {
		if err := p.Check(pf.Addr()); err == nil {
			t.Errorf("the host's own address %s is allowed", pf.Addr())
		}
	}
}

func FuzzAddrPolicy(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, []byte{}, uint8(0))
	f.Add([]byte{127, 0, 0, 1}, []byte{127, 0, 0, 0}, uint8(8))
	f.Add([]byte{169, 254, 169, 254}, []byte{169, 254, 0, 0}, uint8(16))
	f.Add([]byte{1, 1, 1, 1}, []byte{}, uint8(0))
	f.Add([]byte{198, 18, 0, 1}, []byte{}, uint8(0))
	f.Add([]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{}, uint8(0))
	f.Add([]byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1}, []byte{10, 0, 0, 0}, uint8(8))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1}, []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, raw, allow []byte, bits uint8) {
		local := netip.AddrFrom4([4]byte{203, 0, 113, 7})
		p := &AddrPolicy{Local: func() []netip.Prefix { return []netip.Prefix{netip.PrefixFrom(local, 32)} }}
		if len(allow) >= 4 {
			pf, err := netip.AddrFrom4([4]byte(allow[:4])).Prefix(int(bits % 33))
			if err != nil {
				t.Fatal(err)
			}
			p.Allow = []netip.Prefix{pf}
		}
		verdict := func(a netip.Addr) string {
			err := p.Check(a)
			if err == nil {
				return ""
			}
			var d *Denied
			if !errors.As(err, &d) {
				t.Fatalf("Check(%s) = %T %v, want *Denied", a, err, err)
			}
			return d.Rule
		}

		var b4 [4]byte
		copy(b4[:], raw)
		v4 := netip.AddrFrom4(b4)
		mapped := netip.AddrFrom16(v4.As16())
		want := verdict(v4)
		if got := verdict(mapped); got != want {
			t.Fatalf("%s: %q, but %s: %q", v4, want, mapped, got)
		}
		if got := verdict(mapped.WithZone("eth0")); got != want {
			t.Fatalf("%s: %q, but %s: %q", v4, want, mapped.WithZone("eth0"), got)
		}
		// An operator's mapped prefix allows what the plain prefix allows.
		if len(p.Allow) == 1 {
			plain := p.Allow[0]
			p.Allow[0] = netip.PrefixFrom(netip.AddrFrom16(plain.Addr().As16()), plain.Bits()+96)
			if got := verdict(v4); got != want {
				t.Fatalf("%s: %q with allow %s, but %q with allow %s", v4, want, plain, got, p.Allow[0])
			}
			p.Allow[0] = plain
		}
		// Through NAT64, a denied IPv4 address stays denied.
		b16 := nat64.Addr().As16()
		copy(b16[12:], b4[:])
		localUse := nat64Local.Addr().As16() // RFC 8215's local-use prefix, as a /96
		copy(localUse[12:], b4[:])
		if want != "" {
			if verdict(netip.AddrFrom16(b16)) == "" {
				t.Fatalf("%s is denied (%s) but its NAT64 form is allowed", v4, want)
			}
			if verdict(netip.AddrFrom16(localUse)) == "" {
				t.Fatalf("%s is denied (%s) but its local-use NAT64 form is allowed", v4, want)
			}
		}

		if len(raw) >= 16 {
			a := netip.AddrFrom16([16]byte(raw[:16]))
			v := verdict(a)
			if got := verdict(a.WithZone("x")); got != v {
				t.Fatalf("%s: %q, but with a zone: %q", a, v, got)
			}
			if a.Is4In6() {
				if got := verdict(a.Unmap()); got != v {
					t.Fatalf("%s: %q, but %s: %q", a, v, a.Unmap(), got)
				}
			}
		}
	})
}

// No --egress-allow-cidr may cover any of the host's loopback: a service there is reached
// through a route, one at a time.
func TestCheckAllowCIDR(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		ok   bool
	}{
		{"10.0.0.0/8", true},
		{"169.254.0.0/16", true},
		{"128.0.0.0/1", true},
		{"126.255.255.255/32", true},
		{"128.0.0.0/32", true},
		{"fd00::/8", true},
		{"64:ff9b::/96", true},
		{"::2/128", true},
		{"127.0.0.0/8", false},
		{"127.0.0.2/32", false},
		{"127.255.255.255/32", false},
		{"120.0.0.0/5", false},
		{"0.0.0.0/0", false},
		{"::1/128", false},
		{"::/0", false},
		{"::/96", false},
		{"::ffff:127.0.0.1/128", false},
		{"::ffff:0:0/96", false},
	} {
		err := CheckAllowCIDR(netip.MustParsePrefix(tc.cidr))
		if tc.ok != (err == nil) {
			t.Errorf("CheckAllowCIDR(%s) = %v, want ok %v", tc.cidr, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--gateway-resolve") {
			t.Errorf("CheckAllowCIDR(%s) = %v, does not name --gateway-resolve", tc.cidr, err)
		}
	}
}

// What the sandbox is told names the address only when the sandbox asked for it; the audit
// text names the address a name resolved to.
func TestDeniedText(t *testing.T) {
	p := &AddrPolicy{Local: noLocal}
	for _, tc := range []struct {
		addr, host    string
		told, audited string
	}{
		{"10.0.0.5", "", "10.0.0.5 is a private address (RFC 1918)", "10.0.0.5 is a private address (RFC 1918)"},
		{"10.0.0.5", "api.internal", "api.internal resolves to a private address (RFC 1918)", "api.internal resolves to 10.0.0.5, a private address (RFC 1918)"},
		{"64:ff9b::a00:5", "", "64:ff9b::a00:5 is an address embedding 10.0.0.5, a private address (RFC 1918)", "64:ff9b::a00:5 is an address embedding 10.0.0.5, a private address (RFC 1918)"},
		{"64:ff9b::a00:5", "api.internal", "api.internal resolves to an address embedding a private address (RFC 1918)", "api.internal resolves to 64:ff9b::a00:5, an address embedding 10.0.0.5, a private address (RFC 1918)"},
	} {
		var d *Denied
		if !errors.As(p.Check(netip.MustParseAddr(tc.addr)), &d) {
			t.Fatalf("%s allowed", tc.addr)
		}
		d.Host = tc.host
		if d.Error() != tc.told || d.auditText() != tc.audited {
			t.Errorf("%s as %q: told %q, audited %q; want %q, %q", tc.addr, tc.host, d.Error(), d.auditText(), tc.told, tc.audited)
		}
	}
}
