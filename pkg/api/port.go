package api

import (
	"net/netip"
	"strconv"
	"time"
)

// A port stream carries one TCP connection to a port on a sandbox's loopback over the API, the
// way `hiloop sandbox port-forward` uses it: GET /v1/sandboxes/{name}/ports/{port} with
// "Connection: Upgrade" and "Upgrade: tcp". The daemon connects to the port first (127.0.0.1,
// then ::1), so that a port nothing listens on is a plain HTTP error (port_not_listening); then
// it answers 101 Switching Protocols and the connection carries the stream's bytes both ways,
// unframed, each direction ending with a half-close of the other.

// PortUpgrade is the Upgrade token of a port stream.
const PortUpgrade = "tcp"

// A client on the daemon's unix socket may hand the daemon the TCP connection it forwards
// instead of streaming it (the handoff, as an exec's stdio is handed off): it sends the
// connection's descriptor (SCM_RIGHTS) with the first bytes of the port stream's request and
// says so with "Hiloop-Port-Handoff: conn". A daemon that takes it answers 101 with the same
// header and joins that connection to the port itself, so the stream's bytes never pass
// through the client; the upgraded API connection then carries no data and is the forward's
// lifeline: the daemon closes it when the forwarded connection has ended both ways, and a
// client that closes it (or exits) ends the forwarded connection. A 101 without the header
// means the daemon did not take it (not a stream socket, or a daemon that predates the
// handoff): the stream's bytes flow over the API connection as above. Over TCP nothing can be
// handed off.

// PortHandoffHeader says, on a port stream's request, that a connection's descriptor came with
// it and, on the daemon's 101, that the daemon took it.
const PortHandoffHeader = "Hiloop-Port-Handoff"

// PortHandoffConn is PortHandoffHeader's value: the one descriptor is the connection to carry.
const PortHandoffConn = "conn"

// ParsePort reads a port number, 1 to 65535, from a path or a command line.
func ParsePort(what, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, Errorf(CodeInvalidArgument, "invalid %s %q: use 1 to 65535", what, s)
	}
	return n, nil
}

// An exposure is a listener on the host that sandboxd keeps for a port on a sandbox's loopback,
// for as long as the exposure exists: across CLI runs, daemon restarts and the sandbox's stops
// and starts (POST /v1/sandboxes/{name}/exposures, DELETE .../exposures/{port}). Every
// connection to it is joined to a new connection to the port in the sandbox, as a port stream's
// is. While the sandbox is not running, or nothing listens on the port, a connection is refused:
// one that opens with an HTTP request gets a 503 or 502 answer saying why, any other is closed.
//
// An exposure with auth is for its owner only: the daemon serves HTTP on it and lets a request
// through only with the exposure's credential, which a one-time link sets as a cookie in a
// browser (ExposureLink.URL) and a script sends as the header ExposeTokenHeader. Every other
// request gets a 401 page saying how to get a link; the sandbox's server never sees either
// credential. Auth is on by default for an address other than loopback.

// DefaultExposeHostAddr is where an exposure listens unless asked otherwise: the host's loopback.
const DefaultExposeHostAddr = "127.0.0.1"

// Exposure is one exposed port of a sandbox.
type Exposure struct {
	// Port is the port on the sandbox's loopback.
	Port int `json:"port"`
	// HostAddr and HostPort are where the host listens.
	HostAddr string `json:"host_addr"`
	HostPort int    `json:"host_port"`
	// Error says why the daemon does not listen at the moment (the address was taken while the
	// daemon was down, say); empty while it listens.
	Error string `json:"error,omitempty"`
	// Auth is true when only the owner's link or token gets through (HTTP only).
	Auth bool `json:"auth"`
	// Link is, in the answer of POST .../exposures for an exposure with auth, a new one-time
	// link and a token for scripts; each such POST makes new ones.
	Link *ExposureLink `json:"link,omitempty"`
}

// ExposeTokenHeader carries an exposure's token (ExposureLink.Token) on a script's request.
const ExposeTokenHeader = "Hiloop-Expose-Token"

// ExposureLink opens an exposure with auth.
type ExposureLink struct {
	// URL is the exposure's address with a one-time token: opened once (within
	// ExposeLinkTTL) it sets the exposure's cookie in the browser and redirects to the same
	// address without the token.
	URL string `json:"url"`
	// LinkExpiresAt is when the one-time token expires if unused.
	LinkExpiresAt time.Time `json:"link_expires_at"`
	// Token is what a script sends as ExposeTokenHeader, good until TokenExpiresAt (the
	// cookie a link sets is the same credential).
	Token          string    `json:"token"`
	TokenExpiresAt time.Time `json:"token_expires_at"`
}

// ExposeLinkTTL is how long a one-time link waits to be opened; ExposeTokenTTL how long the
// cookie it sets, and a script's token, are good for.
const (
	ExposeLinkTTL  = 15 * time.Minute
	ExposeTokenTTL = 7 * 24 * time.Hour
)

// ExposurePost asks to expose a sandbox's port on the host.
type ExposurePost struct {
	// Port is the port on the sandbox's loopback, 1 to 65535.
	Port int `json:"port"`
	// HostAddr is the host address to listen on; empty means DefaultExposeHostAddr. An address
	// other than a loopback one (an interface's address, 0.0.0.0, ::) needs AllowNonLoopback.
	HostAddr string `json:"host_addr,omitempty"`
	// HostPort is the host port; nil means the same as Port, 0 any free port (the one chosen is
	// kept across restarts).
	HostPort *int `json:"host_port,omitempty"`
	// AllowNonLoopback lets HostAddr be reachable from other machines.
	AllowNonLoopback bool `json:"allow_non_loopback,omitempty"`
	// Auth lets only the owner's link or token through (Exposure.Auth); nil means as the
	// port's exposure has it when it exists (asking again for a new link), else on for an
	// address other than loopback and off on loopback.
	Auth *bool `json:"auth,omitempty"`
}

// Normalize validates p and fills in its defaults, reporting every invalid value together
// (Problems).
func (p *ExposurePost) Normalize() error {
	var ps Problems
	if p.Port < 1 || p.Port > 65535 {
		ps.Addf("port", CodeInvalidArgument, "invalid port %d: use 1 to 65535", p.Port)
	}
	if p.HostAddr == "" {
		p.HostAddr = DefaultExposeHostAddr
	}
	if ip, err := netip.ParseAddr(p.HostAddr); err != nil || ip.Zone() != "" {
		ps.Addf("host_addr", CodeInvalidArgument, "invalid host address %q: give an IP address such as 127.0.0.1, ::1 or 0.0.0.0", p.HostAddr)
	} else {
		p.HostAddr = ip.Unmap().String()
		if !ip.IsLoopback() && !p.AllowNonLoopback {
			ps.Addf("host_addr", CodeInvalidArgument, "host address %s is reachable from other machines: add --allow-non-loopback (allow_non_loopback) to mean it", p.HostAddr)
		}
	}
	if p.HostPort == nil {
		port := p.Port
		p.HostPort = &port
	} else if *p.HostPort < 0 || *p.HostPort > 65535 {
		ps.Addf("host_port", CodeInvalidArgument, "invalid host port %d: use 1 to 65535, or 0 for any free port", *p.HostPort)
	}
	return ps.Err()
}

// ExposureList is the answer of GET /v1/sandboxes/{name}/exposures.
type ExposureList struct {
	Exposures []Exposure `json:"exposures"`
}
