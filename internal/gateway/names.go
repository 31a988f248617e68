package gateway

import (
	"container/list"
	"net/netip"
	"strings"
	"sync"
)

// SyntheticPrefix holds the addresses the gateway gives routed hosts and refused names inside a
// sandbox: RFC 2544's benchmarking range, never routed on the internet, so an address in it can
// only mean "the host this gateway named". No real answer from the host's resolver is ever
// passed on in it.
var SyntheticPrefix = netip.MustParsePrefix("198.18.0.0/15")

// RefusedPrefix is the top of SyntheticPrefix, kept apart from the routed hosts' addresses: the
// resolver answers a name the sandbox's egress policy refuses with an address from it (see
// RefusedNames), so that the client connects, is captured like any connection, and hears the
// refusal from the proxy (a 403, a TLS alert) instead of failing to resolve the name. The
// proxy refuses every connection to an address in it, whatever the policy says.
var RefusedPrefix = netip.MustParsePrefix("198.19.252.0/22")

// MaxRefusedNames is how many refused names one sandbox's resolver holds an address for at
// once: one per address of RefusedPrefix.
const MaxRefusedNames = 1 << (32 - 22)

// MaxNames is how many distinct routed hosts fit in SyntheticPrefix below RefusedPrefix
// (198.18.0.1 to 198.19.251.255); NewNames gives no address to hosts beyond it, so the daemon
// should refuse more routes than that.
const MaxNames = 1<<(32-15) - MaxRefusedNames - 1

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

// RefusedNames gives each name one sandbox's resolver refuses (by its egress policy) an address
// of RefusedPrefix, and tells the sandbox's proxy which name a connection to such an address was
// for: for the audit, and for the answer to a client that names no host in what it sends. The
// same name keeps its address while it is asked for. It holds MaxRefusedNames names at most:
// past that, the name answered longest ago gives its address to the new one, so a sandbox
// asking for a million names costs the daemon a thousand. A client still holding the old
// answer is refused all the same (the address is refused whatever it stands for), and a client
// that sends a name (SNI, Host) is decided by that name; only a nameless connection would be
// told the newer name. Safe for concurrent use; the zero value is ready, and a nil
// *RefusedNames knows no names (Host) and gives none (Addr must not be called on it).
type RefusedNames struct {
	mu     sync.Mutex
	byHost map[string]*list.Element // of *refusedName
	byAddr map[netip.Addr]*list.Element
	order  list.List // of *refusedName, the name answered last first
}

type refusedName struct {
	host string
	addr netip.Addr
}

// Addr returns the address of RefusedPrefix that stands for host, a name the sandbox's policy
// refuses (normalised as Names.Addr does), giving it one if it has none.
func (n *RefusedNames) Addr(host string) netip.Addr {
	host = normalizeHost(host)
	n.mu.Lock()
	defer n.mu.Unlock()
	if e, ok := n.byHost[host]; ok {
		n.order.MoveToFront(e)
		return e.Value.(*refusedName).addr
	}
	if n.byHost == nil {
		n.byHost, n.byAddr = map[string]*list.Element{}, map[netip.Addr]*list.Element{}
	}
	var e *list.Element
	if len(n.byHost) < MaxRefusedNames {
		// Handed out in order, never given back: the len-th address is free.
		base := RefusedPrefix.Addr().As4()
		i := len(n.byHost)
		a := netip.AddrFrom4([4]byte{base[0], base[1], base[2] + byte(i>>8), byte(i)})
		e = n.order.PushFront(&refusedName{host: host, addr: a})
		n.byAddr[a] = e
	} else {
		e = n.order.Back()
		rn := e.Value.(*refusedName)
		delete(n.byHost, rn.host)
		rn.host = host
		n.order.MoveToFront(e)
	}
	n.byHost[host] = e
	return e.Value.(*refusedName).addr
}

// Host returns the name a, an address of RefusedPrefix, stands for now; an IPv4-mapped IPv6
// address counts as its IPv4 address. false: a is not one, or no name has it (the daemon
// restarted since it was answered, or the sandbox dialled it by itself).
func (n *RefusedNames) Host(a netip.Addr) (string, bool) {
	if n == nil {
		return "", false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.byAddr[a.Unmap()]
	if !ok {
		return "", false
	}
	return e.Value.(*refusedName).host, true
}
