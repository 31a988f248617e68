package gateway

import (
	"net/netip"
	"time"
)

// The kinds of Record: how a sandbox's connection or query reached the gateway.
const (
	KindTLS       = "tls"        // captured transparently, decided by the ClientHello's SNI
	KindHTTP      = "http"       // captured transparently, decided by the HTTP/1 Host header
	KindConnect   = "connect"    // a CONNECT tunnel through the explicit proxy
	KindProxyHTTP = "proxy-http" // a request forwarded by the explicit proxy (absolute-form)
	KindTCP       = "tcp"        // captured transparently, decided by its original destination
	KindDNS       = "dns"        // a query to the gateway's resolver
)

// Record is one audited decision of the gateway: a connection, a proxied request or a DNS
// query. Connections are recorded once, when they end (denials at once); storing and showing
// records is the audit log's business, not the gateway's.
type Record struct {
	Sandbox string
	Time    time.Time // when the connection was accepted or the request read
	Kind    string    // one of the Kind constants

	Host string // the name asked for (SNI, Host, CONNECT or URL host); "" when decided by address
	Port uint16
	Addr netip.AddrPort // the address dialled (or refused); zero if none was reached

	// Allowed reports whether the policy let the connection through. Rule says why it was
	// denied (naming the address and the range it is in) or, when allowed, the route used.
	Allowed bool
	Rule    string
	// Err says what went wrong when the connection could not be carried although the policy
	// allowed it or no decision could be taken: a malformed or slow request, a DNS failure,
	// an unreachable upstream, the connection cap. "" when nothing went wrong.
	Err string

	BytesUp   int64 // from the sandbox to the destination
	BytesDown int64 // from the destination to the sandbox
	Duration  time.Duration
}
