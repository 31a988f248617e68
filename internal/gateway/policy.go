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
	Allow []netip.Prefix
	// Local returns the host's own interface addresses, which no sandbox may reach; it is
	// called on every Check, so it should be cheap. nil means the host's interfaces, listed
	// at most once a second.
	Local func() []netip.Prefix
}

// Denied is the error of a refused address: which address, and the rule that refused it.
type Denied struct {
	Addr netip.Addr
	Host string // the name that resolved to Addr, "" when Addr was asked for directly
	Rule string // e.g. "a private address (RFC 1918)"
}

func (d *Denied) Error() string {
	if d.Host != "" {
		return d.Host + " resolves to " + d.Addr.String() + ", " + d.Rule
	}
	return d.Addr.String() + " is " + d.Rule
}

const rulePrivate = "a private address (RFC 1918)"

// deniedRanges are the ranges no sandbox may reach unless the operator allows them. The first
// match names the rule, so a narrower range comes before the range that contains it.
var deniedRanges = []struct {
	prefix netip.Prefix
	rule   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a this-network address (0.0.0.0/8)"},
	{netip.MustParsePrefix("10.0.0.0/8"), rulePrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared address (CGNAT, RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("168.63.129.16/32"), "cloud metadata (Azure WireServer)"},
	{netip.MustParsePrefix("172.16.0.0/12"), rulePrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), rulePrivate},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address (198.18.0.0/15, the gateway's names for routed hosts)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address (240.0.0.0/4)"},

	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	// IPv4-compatible addresses are deprecated; no legitimate destination uses them, and a
	// host with a sit tunnel would carry them to the embedded IPv4 address.
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address (::/96, deprecated)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address (64:ff9b:1::/48)"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address (fc00::/7)"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address (fec0::/10, deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// IPv6 ranges that carry an IPv4 address: a host with NAT64 or 6to4 would deliver them to the
// embedded address, so they get its verdict.
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// Check returns nil if a sandbox may reach a, else a *Denied naming the rule. Mapped and
// zoned forms of an address get the verdict of the plain address.
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
			return &Denied{Addr: a, Rule: "unchecked: the host's own addresses cannot be listed: " + err.Error()}
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
			return &Denied{Addr: a, Rule: rule}
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
			return &Denied{Addr: a, Rule: r.rule}
		}
	}
	if v4, ok := embedded(a); ok {
		if err := p.Check(v4); err != nil {
			d := err.(*Denied)
			return &Denied{Addr: a, Rule: fmt.Sprintf("an address embedding %s, %s", v4, d.Rule)}
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

// embedded returns the IPv4 address inside a NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address.
func embedded(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
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
