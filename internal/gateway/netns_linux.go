//go:build linux

package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tableName is the nftables table (family inet) the gateway owns in a sandbox's namespace. It
// holds all of the capture and nothing else, so Setup can replace it whole.
const tableName = "hiloop"

// Setup programs the network namespace ns (an open /proc/PID/ns/net or a bind-mounted
// namespace file) so that everything leaving the sandbox goes through the gateway: lo is up
// and carries default routes for IPv4 and IPv6 (otherwise a connect to a non-loopback address
// fails with ENETUNREACH before the capture sees it); every TCP connection to a non-loopback
// address is redirected to ProxyPort on loopback, and TCP and UDP to port 53 of a non-loopback
// address to DNSPort; every other packet to a non-loopback address is rejected (a TCP reset,
// or ICMP administratively prohibited, so clients fail at once and QUIC falls back to TCP).
// Traffic between loopback addresses is untouched. IPv6 is captured like IPv4, onto ::1 (the
// same ports there: without a listener on [::1]:DNSPort, DNS over IPv6 is refused, not lost).
//
// Setup is idempotent: it replaces the gateway's table atomically, so calling it again on a
// namespace that already has the rules (a daemon restart) leaves one copy of them. Until
// Setup has run, a namespace with only lo has no way out at all, so the capture fails closed.
func Setup(ns *os.File) error {
	_, err := inNamespace(ns, func() (struct{}, error) { return struct{}{}, setup() })
	return err
}

// setup is Setup in the calling thread's namespace.
func setup() error {
	if err := routeViaLoopback(); err != nil {
		return fmt.Errorf("gateway: set up network namespace: %w", err)
	}
	if err := replaceTable(); err != nil {
		return fmt.Errorf("gateway: set up network namespace: %w", err)
	}
	return nil
}

// sockets are the gateway's listeners inside one sandbox: the proxy's, and the resolver's UDP
// and TCP sockets, one of each per loopback address.
type sockets struct {
	proxy   []net.Listener
	dnsUDP  []net.PacketConn
	dnsTCP  []net.Listener
	closers []io.Closer // all of the above, in the order they were made
	netns   uint64      // the namespace they live in (namespaceOf), when Prepare made them
}

func (s *sockets) close() {
	for _, c := range s.closers {
		c.Close()
	}
}

// setupAndListen is Setup followed by the gateway's listeners, all on one thread that joins ns
// once: a start pays for one thread and one setns, not one per socket.
func setupAndListen(ns *os.File) (*sockets, error) {
	return inNamespace(ns, func() (*sockets, error) {
		if err := setup(); err != nil {
			return nil, err
		}
		s := &sockets{}
		listen := func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err != nil {
				return nil, fmt.Errorf("gateway: listen on %s %s in sandbox namespace: %w", network, addr, err)
			}
			s.closers = append(s.closers, ln)
			return ln, nil
		}
		for _, addr := range proxyAddrs {
			ln, err := listen("tcp", addr)
			if err != nil {
				s.close()
				return nil, err
			}
			s.proxy = append(s.proxy, ln)
		}
		for _, addr := range dnsAddrs {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("gateway: listen on udp %s in sandbox namespace: %w", addr, err)
			}
			s.closers = append(s.closers, pc)
			s.dnsUDP = append(s.dnsUDP, pc)
			ln, err := listen("tcp", addr)
			if err != nil {
				s.close()
				return nil, err
			}
			s.dnsTCP = append(s.dnsTCP, ln)
		}
		return s, nil
	})
}

// Listen announces on addr ("127.0.0.1:3128", "[::1]:3128") inside the network namespace ns.
// The listener stays in that namespace and may be used from any goroutine; only connections
// made in the namespace reach it.
func Listen(ns *os.File, network, addr string) (net.Listener, error) {
	l, err := inNamespace(ns, func() (net.Listener, error) { return net.Listen(network, addr) })
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on %s %s in sandbox namespace: %w", network, addr, err)
	}
	return l, nil
}

// ListenPacket is Listen for packet sockets ("udp", "127.0.0.1:53").
func ListenPacket(ns *os.File, network, addr string) (net.PacketConn, error) {
	c, err := inNamespace(ns, func() (net.PacketConn, error) { return net.ListenPacket(network, addr) })
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on %s %s in sandbox namespace: %w", network, addr, err)
	}
	return c, nil
}

// inNamespace runs fn on an OS thread that has joined the network namespace ns. The thread is
// never unlocked: when the goroutine ends Go ends the thread, and the namespace change with
// it, so no other goroutine ever runs in the sandbox's namespace. Sockets fn creates belong to
// the namespace for their whole life, wherever they are used from.
func inNamespace[T any](ns *os.File, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("join network namespace: %w", os.NewSyscallError("setns", err))}
			return
		}
		v, err := fn()
		done <- result{v, err}
	}()
	res := <-done
	runtime.KeepAlive(ns)
	return res.v, res.err
}

// routeViaLoopback brings lo up and gives it the default routes of both families, in the
// calling thread's namespace. Replacing (not adding) keeps it idempotent.
func routeViaLoopback() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	v4 := &netlink.Route{
		LinkIndex: lo.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		Scope:     netlink.SCOPE_LINK,
		// 127.0.0.1 has host scope, so the kernel would not pick it as the source for a
		// link-scope route and connections would leave from 0.0.0.0, which no answer reaches.
		Src: net.IPv4(127, 0, 0, 1).To4(),
	}
	if err := netlink.RouteReplace(v4); err != nil {
		return fmt.Errorf("default IPv4 route via lo: %w", err)
	}
	v6 := &netlink.Route{
		LinkIndex: lo.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
	}
	// A kernel without IPv6 has no IPv6 sockets to capture.
	if err := netlink.RouteReplace(v6); err != nil && !errors.Is(err, unix.EAFNOSUPPORT) {
		return fmt.Errorf("default IPv6 route via lo: %w", err)
	}
	return nil
}

// replaceTable replaces the gateway's nftables table in the calling thread's namespace with a
// fresh one, in one batch: the kernel applies all of it or none, and never shows a namespace
// without rules in between. The table is deleted in that batch only when it is there (a daemon
// restart): a batch that deletes a table waits for an RCU grace period, 3-18 ms here, which a
// new sandbox's start would otherwise pay for nothing.
func replaceTable() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("nftables: list tables: %w", err)
	}
	if slices.ContainsFunc(tables, func(o *nftables.Table) bool { return o.Name == tableName }) {
		c.DelTable(t)
	}
	c.AddTable(t)
	for _, ch := range captureChains(t) {
		c.AddChain(ch.chain)
		for _, r := range ch.rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch.chain, Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: replace table inet %s: %w", tableName, err)
	}
	return nil
}

// chainRules is one base chain and its rules, in order.
type chainRules struct {
	chain *nftables.Chain
	rules [][]expr.Any
}

// captureChains is the gateway's ruleset for table t, in nft's words:
//
//	chain capture { type nat hook output priority dstnat
//	  ip daddr != 127.0.0.0/8 tcp dport 53 redirect to :DNSPort
//	  ip daddr != 127.0.0.0/8 udp dport 53 redirect to :DNSPort
//	  ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :ProxyPort
//	  (the same three for ip6 daddr != ::1) }
//	chain confine { type filter hook output priority filter; policy drop
//	  ip daddr 127.0.0.0/8 accept
//	  ip6 daddr ::1 accept
//	  meta l4proto tcp reject with tcp reset
//	  reject with icmpx admin-prohibited }
//
// The nat chain runs first (dstnat is -100, filter 0), so a redirected packet already has a
// loopback destination when confine sees it; what is still bound elsewhere was not captured.
func captureChains(t *nftables.Table) []chainRules {
	capture := &nftables.Chain{
		Name: "capture", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	}
	drop := nftables.ChainPolicyDrop
	confine := &nftables.Chain{
		Name: "confine", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	}

	var redirects [][]expr.Any
	for _, notLoopback := range [][]expr.Any{notLoopback4(), notLoopback6()} {
		redirects = append(redirects,
			cat(notLoopback, l4proto(unix.IPPROTO_TCP), dport(53), redirectTo(DNSPort)),
			cat(notLoopback, l4proto(unix.IPPROTO_UDP), dport(53), redirectTo(DNSPort)),
			cat(notLoopback, l4proto(unix.IPPROTO_TCP), redirectTo(ProxyPort)),
		)
	}
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	confines := [][]expr.Any{
		cat(loopback4(), []expr.Any{accept}),
		cat(loopback6(), []expr.Any{accept}),
		cat(l4proto(unix.IPPROTO_TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
		{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}},
	}
	return []chainRules{{capture, redirects}, {confine, confines}}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var all []expr.Any
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

// nfproto matches packets of one family in an inet table.
func nfproto(family byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{family}},
	}
}

// daddr4Net8 loads the IPv4 destination's first octet: 127.0.0.0/8 is all of loopback.
func daddr4Net8() []expr.Any {
	return cat(nfproto(unix.NFPROTO_IPV4), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 1},
	})
}

func loopback4() []expr.Any {
	return cat(daddr4Net8(), []expr.Any{&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127}}})
}

func notLoopback4() []expr.Any {
	return cat(daddr4Net8(), []expr.Any{&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{127}}})
}

// daddr6 loads the IPv6 destination: ::1 is all of IPv6 loopback.
func daddr6() []expr.Any {
	return cat(nfproto(unix.NFPROTO_IPV6), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
	})
}

func loopback6() []expr.Any {
	return cat(daddr6(), []expr.Any{&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: net.IPv6loopback}})
}

func notLoopback6() []expr.Any {
	return cat(daddr6(), []expr.Any{&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: net.IPv6loopback}})
}

func l4proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// dport matches the destination port of TCP or UDP (the same offset in both headers).
func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// redirectTo sends the connection to port on the namespace's loopback (127.0.0.1 or ::1: the
// kernel picks the loopback address of the packet's family for locally made packets).
func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}
