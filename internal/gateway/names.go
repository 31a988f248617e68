package gateway

import (
	"net/netip"
	"strings"
)

// SyntheticPrefix holds the addresses the gateway gives routed hosts inside a sandbox: RFC 2544's
// benchmarking range, never routed on the internet, so an address in it can only mean "the host
// this gateway named". No real answer from the host's resolver is ever passed on in it.
var SyntheticPrefix = netip.MustParsePrefix("198.18.0.0/15")

// MaxNames is how many distinct routed hosts fit in SyntheticPrefix; NewNames gives no address
// to hosts beyond it, so the daemon should refuse more routes than that.
const MaxNames = 1<<(32-15) - 2

// Names maps each routed host (a --gateway-resolve route's host) to a synthetic address from
// SyntheticPrefix and back. The resolver answers a sandbox's A query for a routed host with its
// address; the proxy reads a connection whose original destination is such an address as one
// for that host. It is immutable once built, so safe for concurrent use; a nil *Names has no
// hosts.
type Names struct {
	addrs map[string]netip.Addr
	hosts map[netip.Addr]string
}

// NewNames gives the i-th distinct host of routes, in order of first appearance, the address
// 198.18.0.0 + i + 1. The same routes in the same order give the same addresses, so a daemon
// restarted with the same flags answers sandboxes as before.
func NewNames(routes []Route) *Names {
	n := &Names{addrs: map[string]netip.Addr{}, hosts: map[netip.Addr]string{}}
	base := SyntheticPrefix.Addr().As4()
	next := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for _, r := range routes {
		host := normalizeHost(r.Host)
		if _, ok := n.addrs[host]; ok || host == "" || len(n.addrs) == MaxNames {
			continue
		}
		next++
		a := netip.AddrFrom4([4]byte{byte(next >> 24), byte(next >> 16), byte(next >> 8), byte(next)})
		n.addrs[host], n.hosts[a] = a, host
	}
	return n
}

// Addr returns the synthetic address of a routed host; host may have upper case letters and a
// trailing dot, as DNS questions do.
func (n *Names) Addr(host string) (netip.Addr, bool) {
	if n == nil {
		return netip.Addr{}, false
	}
	a, ok := n.addrs[normalizeHost(host)]
	return a, ok
}

// Host returns the routed host a synthetic address stands for; an IPv4-mapped IPv6 address (as an
// IPv6 socket reports an IPv4 destination) counts as its IPv4 address.
func (n *Names) Host(addr netip.Addr) (string, bool) {
	if n == nil {
		return "", false
	}
	h, ok := n.hosts[addr.Unmap()]
	return h, ok
}

// Synthetic reports whether addr is in SyntheticPrefix, routed host or not: such an address is
// never a real destination.
func (n *Names) Synthetic(addr netip.Addr) bool {
	return SyntheticPrefix.Contains(addr.Unmap())
}

// normalizeHost lower-cases the ASCII letters of a host name and drops one trailing dot. Only
// ASCII is folded: DNS names compare case-insensitively in ASCII alone (RFC 4343), and a name
// from a packet may hold any byte, which a Unicode fold would rewrite.
func normalizeHost(s string) string {
	s = strings.TrimSuffix(s, ".")
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
