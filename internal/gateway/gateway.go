// Package gateway is a sandbox's only way out. A sandbox's network namespace has only `lo`;
// the daemon programs that namespace (a default route on lo, nftables rules that redirect every
// TCP connection to a non-loopback address to the gateway's listener, and DNS to the gateway's
// resolver) and holds the gateway's listening sockets inside it. The gateway decides each
// connection by the name the client asked for (TLS SNI, the HTTP Host, a CONNECT target) or, when
// there is none, by the address it dialled; checks the address it will actually dial against
// the ranges no sandbox may reach (the host's loopback, private, link-local and metadata
// addresses); and splices bytes to the destination.
//
// It owns the per-sandbox listeners and rules, the DNS answers it gives sandboxes and the
// decisions it takes. It must not touch the store or a sandbox's lifecycle: the sandbox manager
// attaches a running sandbox and detaches it before it stops.
package gateway

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ProxyPort is the port the gateway listens on inside every sandbox, on 127.0.0.1 and ::1: the
// explicit proxy that HTTP_PROXY and HTTPS_PROXY name, and where the capture redirects every
// outgoing TCP connection. Each sandbox has its own namespace, so the port is the same in all.
const ProxyPort = 3128

// DNSPort is the port of the gateway's resolver inside every sandbox (127.0.0.1, UDP and TCP);
// the sandbox's /etc/resolv.conf names 127.0.0.1, and the capture redirects port 53 elsewhere
// to it.
const DNSPort = 53

// ProxyURL is the explicit proxy's address as a sandbox reaches it.
var ProxyURL = "http://127.0.0.1:" + strconv.Itoa(ProxyPort)

// ProxyEnv is the environment every process in a sandbox gets (exec, SSH sessions, harnesses)
// so that tools that prefer a proxy use the gateway explicitly; tools that ignore it are
// captured anyway.
func ProxyEnv() []string {
	const noProxy = "localhost,127.0.0.1,::1"
	return []string{
		"HTTP_PROXY=" + ProxyURL, "HTTPS_PROXY=" + ProxyURL,
		"http_proxy=" + ProxyURL, "https_proxy=" + ProxyURL,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
	}
}

// Route sends connections for one host and port to another address, as curl's --resolve does:
// sandboxd's --gateway-resolve HOST:PORT=ADDR:PORT. A route is the operator's explicit choice, so
// its address is dialled even when it is one no sandbox may otherwise reach (a test server on
// the host's loopback).
type Route struct {
	Host string // lower case, no trailing dot
	Port uint16
	To   netip.AddrPort
}

// ParseRoute parses HOST:PORT=ADDR:PORT.
func ParseRoute(s string) (Route, error) {
	from, to, ok := strings.Cut(s, "=")
	if !ok {
		return Route{}, fmt.Errorf("gateway route %q: want HOST:PORT=ADDR:PORT", s)
	}
	host, port, err := splitHostPort(from)
	if err != nil {
		return Route{}, fmt.Errorf("gateway route %q: %w", s, err)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return Route{}, fmt.Errorf("gateway route %q: %q is an address; a route maps a host name", s, host)
	}
	dst, err := netip.ParseAddrPort(to)
	if err != nil || dst.Port() == 0 {
		return Route{}, fmt.Errorf("gateway route %q: %q is not ADDR:PORT", s, to)
	}
	return Route{Host: host, Port: port, To: dst}, nil
}

// splitHostPort splits HOST:PORT into a normalised host name and a port from 1 to 65535.
func splitHostPort(s string) (string, uint16, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("%q is not HOST:PORT", s)
	}
	host := strings.TrimSuffix(strings.ToLower(strings.Trim(s[:i], "[]")), ".")
	p, err := strconv.ParseUint(s[i+1:], 10, 16)
	if err != nil || p == 0 || host == "" {
		return "", 0, fmt.Errorf("%q is not HOST:PORT with a port from 1 to 65535", s)
	}
	return host, uint16(p), nil
}
