//go:build linux

package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h, which
// golang.org/x/sys does not define; the IPv6 twin of SO_ORIGINAL_DST.
const ip6tSOOriginalDst = 80

// OriginalDst returns the address a TCP connection accepted by the gateway was dialled to
// before the capture redirected it. For a connection that was not redirected (a client of the
// explicit proxy) it is the connection's local address, which is how the proxy tells the two
// apart: compare it with the listener's address. IPv4 addresses are returned unmapped.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("gateway: original destination: %T is not a TCP connection", c)
	}
	la, ok := tc.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, errors.New("gateway: original destination: connection has no local address")
	}
	local := la.AddrPort()
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("gateway: original destination: %w", err)
	}
	var dst netip.AddrPort
	var opErr error
	err = raw.Control(func(fd uintptr) {
		if local.Addr().Is4() {
			dst, opErr = originalDst4(int(fd))
		} else {
			dst, opErr = originalDst6(int(fd))
		}
	})
	if err == nil {
		err = opErr
	}
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOPROTOOPT):
		// No conntrack entry (or no conntrack in this namespace at all): nothing can have
		// translated the connection, so it went where it arrived.
		return local, nil
	case err != nil:
		return netip.AddrPort{}, fmt.Errorf("gateway: original destination: %w", err)
	}
	return dst, nil
}

// originalDst4 reads SO_ORIGINAL_DST, a struct sockaddr_in. x/sys has no getsockopt into an
// arbitrary buffer; an IPv6Mreq (20 bytes) is the smallest of its fixed ones that holds the
// 16-byte sockaddr_in, and the kernel fills only that much.
func originalDst4(fd int) (netip.AddrPort, error) {
	m, err := unix.GetsockoptIPv6Mreq(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST)
	if err != nil {
		return netip.AddrPort{}, os.NewSyscallError("getsockopt SO_ORIGINAL_DST", err)
	}
	// struct sockaddr_in: family (host order), port (network order), address.
	b := m.Multiaddr[:]
	if fam := binary.NativeEndian.Uint16(b[0:2]); fam != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: address family %d, want AF_INET", fam)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), nil
}

// originalDst6 reads IP6T_SO_ORIGINAL_DST, a struct sockaddr_in6, into the sockaddr_in6 that
// begins an IPv6MTUInfo.
func originalDst6(fd int) (netip.AddrPort, error) {
	i, err := unix.GetsockoptIPv6MTUInfo(fd, unix.SOL_IPV6, ip6tSOOriginalDst)
	if err != nil {
		return netip.AddrPort{}, os.NewSyscallError("getsockopt IP6T_SO_ORIGINAL_DST", err)
	}
	sa := i.Addr
	if sa.Family != unix.AF_INET6 {
		return netip.AddrPort{}, fmt.Errorf("IP6T_SO_ORIGINAL_DST: address family %d, want AF_INET6", sa.Family)
	}
	// Port holds the port's bytes in network order, read as a native integer.
	var pb [2]byte
	binary.NativeEndian.PutUint16(pb[:], sa.Port)
	port := binary.BigEndian.Uint16(pb[:])
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port), nil
}
