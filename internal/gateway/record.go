package gateway

import (
	"net/netip"
	"time"
)

// The kinds of Record: how a sandbox's traffic reached the gateway.
const (
	KindTLS       = "tls"        // a captured connection opening with a TLS ClientHello, decided by its SNI
	KindHTTP      = "http"       // a captured plain HTTP/1 connection, decided by its Host
	KindConnect   = "connect"    // a CONNECT through the explicit proxy
	KindProxyHTTP = "proxy-http" // a plain HTTP request through the explicit proxy
	KindTCP       = "tcp"        // a captured connection with no name in it, decided by its address
	KindDNS       = "dns"        // a query to the sandbox's resolver
)

// Record is one decision of the gateway, handed to an Audit callback: a connection allowed or
// refused, or a DNS query answered. The callback runs on the goroutine serving the sandbox, so it
// must not block; storing and showing records is the audit log's business, not the gateway's.
type Record struct {
	Sandbox string    // the sandbox's name
	Time    time.Time // when the connection or query arrived
	Kind    string    // one of the Kind constants

	Host string         // the name asked for (SNI, Host, CONNECT target, DNS question), lower case, no trailing dot; empty when only an address is known
	Port uint16         // the destination port asked for; 0 for dns
	Addr netip.AddrPort // the address dialled (or refused); zero when none was reached, and for dns

	// Allowed reports whether the policy let the connection through, or whether a DNS query got
	// an answer (possibly an empty one). Rule names what decided: the rule that denied (naming
	// the address and the range it is in), the route used, or for dns "route", "localhost",
	// "nxdomain", "servfail", "busy", "formerr", "notimp", "refused", or "withheld: ..." for an
	// answer left without addresses the proxy would refuse (naming the first). A refusal by the
	// sandbox's egress policy names its rule: "egress deny *.example.com", "egress closed:
	// api.other.test:443 is not allowed" (for dns, without the port; the name is then answered
	// with an address of RefusedPrefix, see Resolver.Refused, and Allowed is false).
	Allowed bool
	Rule    string
	// Err says what went wrong when a connection could not be carried although the policy
	// allowed it, or no decision could be taken: a malformed or slow request, a DNS failure, an
	// unreachable upstream, the connection cap. "" when nothing went wrong.
	Err string

	BytesUp   int64         // bytes from the sandbox (for dns: the query message)
	BytesDown int64         // bytes to the sandbox (for dns: the answer message)
	Duration  time.Duration // from arrival until the connection closed or the answer was sent

	// Terminated reports a TLS connection the gateway terminated because a secret is bound to
	// its host. Secret names the secrets injected into its requests (comma-separated labels:
	// a secret's name or placeholder, never its value); SecretMisuse reports a placeholder seen
	// where it is not bound (another header, the URL, the body, another host, clear text),
	// which was sent on unchanged. Scrubbed names the secrets whose values the host handed back
	// in an answer, replaced by their placeholders before the sandbox read it (the same labels).
	Terminated   bool
	Secret       string
	SecretMisuse bool
	Scrubbed     string

	QueryType   string       // dns only: the question's type ("A", "AAAA", "HTTPS", or a number)
	Answers     []netip.Addr // dns only: the addresses answered, at most the first 16
	AnswerCount int          // dns only: how many addresses were answered

	// SandboxID is the daemon's id of the sandbox, stable for its life: the audit log keeps
	// records by it, so a sandbox made later under the same name does not inherit them.
	SandboxID string
}
