package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// AddrPolicy decides whether the gateway may dial an address for a sandbox. It is applied to
// the address actually dialled, after resolution, so a name that resolves to a denied address is
// denied too (no DNS-rebinding bypass). A route's target is not checked: the operator chose it.
// The zero AddrPolicy (and a nil *AddrPolicy) denies the always-denied ranges and the host's
// own addresses and allows the rest.
type AddrPolicy struct {
	// Allow lists the ranges the operator allows despite the rules (sandboxd --egress-allow-cidr).
	// None may cover the host's loopback: sandboxd refuses such a range (CheckAllowCIDR).
	Allow []netip.Prefix
	// Local returns the host's own interface addresses, which no sandbox may reach; it is
	// called on every Check, so it should be cheap. nil means the host's interfaces, listed
	// at most once a second.
	Local func() []netip.Prefix
}

// Denied is the error of a refused address: which address, and the rule that refused it. Its
// Error is what the sandbox is told: it names the address only when the sandbox asked for that
// address, never one a name resolved to, so a sandbox cannot map the names of a private network
// by asking the gateway for them. The audit keeps the address (Record.Addr and Record.Rule).
type Denied struct {
	Addr netip.Addr
	Host string // the name that resolved to Addr, "" when Addr was asked for directly
	Rule string // e.g. "a private address (RFC 1918)"; it names no address
	// Embedded is the IPv4 address inside Addr (NAT64, 6to4) whose rule refused it, if that
	// is why Addr was refused.
	Embedded netip.Addr
	// hostOnly: no --egress-allow-cidr opens Addr (the host's loopback or own addresses).
	hostOnly bool
}

func (d *Denied) Error() string { return d.text(d.Host == "") }

// auditText is the refusal as the operator sees it: with the address a name resolved to.
func (d *Denied) auditText() string { return d.text(true) }

func (d *Denied) text(withAddr bool) string {
	rule := d.Rule
	if d.Embedded.IsValid() {
		if withAddr {
			rule = "an address embedding " + d.Embedded.String() + ", " + rule
		} else {
			rule = "an address embedding " + rule
		}
	}
	switch {
	case d.Host == "":
		return d.Addr.String() + " is " + rule
	case withAddr:
		return d.Host + " resolves to " + d.Addr.String() + ", " + rule
	}
	return d.Host + " resolves to " + rule
}

// hint tells the sandbox how the refusal could be lifted by the operator.
func (d *Denied) hint() string {
	if d.hostOnly {
		return "a service on the host is reached only through sandboxd --gateway-resolve HOST:PORT=ADDR:PORT"
	}
	return "sandboxd --egress-allow-cidr allows it"
}

const (
	rulePrivate  = "a private address (RFC 1918)"
	ruleLoopback = "a loopback address"
)

// loopbackRanges are the host's loopback: no --egress-allow-cidr may cover them
// (CheckAllowCIDR), so a sandbox reaches a service there only through a route.
var loopbackRanges = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// CheckAllowCIDR returns an error if pf may not be one of AddrPolicy.Allow (sandboxd
// --egress-allow-cidr): a range that covers any of the host's loopback (127.0.0.0/8, ::1),
// whose services a sandbox reaches only through the operator's routes, one service at a time.
func CheckAllowCIDR(pf netip.Prefix) error {
	pf = unmapPrefix(pf.Masked())
	for _, lo := range loopbackRanges {
		if pf.Overlaps(lo) {
			return fmt.Errorf("%s covers the host's loopback (%s), which no range may open: a service on the host's loopback is reached with --gateway-resolve HOST:PORT=ADDR:PORT, one service at a time", pf, lo)
		}
	}
	return nil
}

// deniedRanges are the ranges no sandbox may reach unless the operator allows them. The first
// match names the rule, so a narrower range comes before the range that contains it.
var deniedRanges = []struct {
	prefix netip.Prefix
	rule   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a this-network address (0.0.0.0/8)"},
	{netip.MustParsePrefix("10.0.0.0/8"), rulePrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared address (CGNAT, RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), ruleLoopback},
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("168.63.129.16/32"), "cloud metadata (Azure WireServer)"},
	{netip.MustParsePrefix("172.16.0.0/12"), rulePrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), rulePrivate},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address (198.18.0.0/15, the gateway's names for routed hosts and refused names)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address (240.0.0.0/4)"},

	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), ruleLoopback},
	// IPv4-compatible addresses are deprecated; no legitimate destination uses them, and a
	// host with a sit tunnel would carry them to the embedded IPv4 address.
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address (::/96, deprecated)"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address (fc00::/7)"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address (fec0::/10, deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// IPv6 ranges that carry an IPv4 address: a host with NAT64 or 6to4 would deliver them to the
// embedded address, so they get its verdict. A NAT64 prefix of the operator's own (RFC 6052
// allows any /32 to /96 of theirs) is not known here: such an address is checked as the IPv6
// address it is, which fails safe only as far as the translator's IPv4 side is reachable anyway.
var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052's well-known prefix
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215: for a translator of the operator's
	sixTo4     = netip.MustParsePrefix("2002::/16")
)

// Check returns nil if a sandbox may reach a, else a *Denied naming the rule. Mapped and
// zoned forms of an address get the verdict of the plain address; an address that embeds an
// IPv4 address (NAT64, 6to4) is refused when that address is, whatever range allows the IPv6
// form, so an allowed IPv6 range never opens a denied IPv4 address through a translator.
func (p *AddrPolicy) Check(a netip.Addr) error {
	a = a.WithZone("").Unmap()
	if !a.IsValid() {
		return &Denied{Addr: a, Rule: "not a valid address"}
	}
	// The host's own addresses first: an allowed range that covers the host's network must
	// not expose the host itself.
	var local []netip.Prefix
	if p != nil && p.Local != nil {
		local = p.Local()
	} else {
		var err error
		if local, err = hostAddrs(); err != nil {
			// Without the list a sandbox could reach the host's public addresses: refuse.
			return &Denied{Addr: a, Rule: "unchecked: the host's own addresses cannot be listed: " + err.Error(), hostOnly: true}
		}
	}
	for _, pf := range local {
		if unmapPrefix(pf).Contains(a) {
			rule := "an address of this host"
			for _, r := range deniedRanges { // the more telling name: "a loopback address"
				if r.prefix.Contains(a) {
					rule = r.rule
					break
				}
			}
			return &Denied{Addr: a, Rule: rule, hostOnly: true}
		}
	}
	for _, v4 := range embedded(a) {
		if err := p.Check(v4); err != nil {
			d := err.(*Denied)
			return &Denied{Addr: a, Rule: d.Rule, Embedded: v4, hostOnly: d.hostOnly}
		}
	}
	if p != nil {
		for _, pf := range p.Allow {
			if unmapPrefix(pf).Contains(a) {
				return nil
			}
		}
	}
	for _, r := range deniedRanges {
		if r.prefix.Contains(a) {
			return &Denied{Addr: a, Rule: r.rule, hostOnly: r.rule == ruleLoopback}
		}
	}
	return nil
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96), so an operator's mapped
// prefix covers the plain IPv4 addresses Check compares it with.
func unmapPrefix(pf netip.Prefix) netip.Prefix {
	if a := pf.Addr(); a.Is4In6() && pf.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), pf.Bits()-96)
	}
	return pf
}

// embedded returns the IPv4 addresses an IPv6 address may carry to a translator: the one
// inside a NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address; for RFC 8215's local-use prefix
// 64:ff9b:1::/48, whose translator may use any prefix length from /48 to /96 in it, the address
// each RFC 6052 layout would embed, where the address has that layout's form (the reserved
// octet and the suffix zero). The caller refuses the IPv6 address if any of them is refused.
func embedded(a netip.Addr) []netip.Addr {
	b := a.As16()
	v4 := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	zero := func(from int) bool {
		for _, x := range b[from:] {
			if x != 0 {
				return false
			}
		}
		return true
	}
	switch {
	case nat64.Contains(a):
		return []netip.Addr{v4(12, 13, 14, 15)}
	case sixTo4.Contains(a):
		return []netip.Addr{v4(2, 3, 4, 5)}
	case nat64Local.Contains(a):
		list := []netip.Addr{v4(12, 13, 14, 15)} // a /96 translator
		// RFC 6052 section 2.2: bits 64 to 71 are zero in the shorter layouts.
		if b[8] == 0 {
			if zero(11) {
				list = append(list, v4(6, 7, 9, 10)) // /48
			}
			if zero(12) {
				list = append(list, v4(7, 9, 10, 11)) // /56
			}
			if zero(13) {
				list = append(list, v4(9, 10, 11, 12)) // /64
			}
		}
		return list
	}
	return nil
}

// hostAddrs lists the host's interface addresses, at most once a second: Check runs for every
// connection, and listing them costs two netlink dumps.
func hostAddrs() ([]netip.Prefix, error) {
	hostAddrCache.Lock()
	defer hostAddrCache.Unlock()
	if hostAddrCache.list != nil && time.Since(hostAddrCache.at) < time.Second {
		return hostAddrCache.list, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		if hostAddrCache.list != nil {
			return hostAddrCache.list, nil // the last list is better than none
		}
		return nil, err
	}
	list := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip, ok := netip.AddrFromSlice(n.IP); ok {
			// The address itself, not its subnet: the neighbours on a public subnet are
			// ordinary destinations.
			ip = ip.Unmap()
			list = append(list, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	hostAddrCache.list, hostAddrCache.at = list, time.Now()
	return list, nil
}

var hostAddrCache struct {
	sync.Mutex
	at   time.Time
	list []netip.Prefix
}
