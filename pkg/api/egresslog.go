package api

import "time"

// EgressRecord is one decision of a sandbox's egress gateway, as its audit log keeps it: a
// connection allowed or refused, a DNS query answered, or a note that records were dropped.
// Every field but Answers and Dropped is always present, so a reader need not tell "empty" from
// "missing".
type EgressRecord struct {
	// Seq numbers the sandbox's records from 1, with no holes; the daemon keeps a bounded number
	// per sandbox and drops the oldest, so the first one kept may have a higher seq.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"` // when the connection or query arrived
	// Kind is how the traffic reached the gateway: tls (a captured TLS connection, decided by its
	// SNI), http (captured plain HTTP, by its Host), connect (a CONNECT through the explicit
	// proxy), proxy-http (plain HTTP through the explicit proxy), tcp (captured, no name, by
	// its address), dns (a query to the sandbox's resolver), or dropped (see Dropped).
	Kind string `json:"kind"`
	// Host is the name asked for: the SNI, the Host, the CONNECT target, the DNS question. ""
	// when only an address is known.
	Host string `json:"host"`
	Port uint16 `json:"port"` // the destination port asked for; 0 for dns
	// Addr is the address dialled, or refused ("203.0.113.7:443", "[2001:db8::1]:443"); "" when
	// none was reached, and for dns.
	Addr string `json:"addr"`
	// Allowed says whether the policy let the connection through (for dns: whether the query
	// was answered, possibly with no address; false for a name the egress policy refuses, which
	// is answered with an address that stands for the refusal).
	Allowed bool `json:"allowed"`
	// Rule names what decided: the rule that denied (naming the address and the range it is
	// in), the route used, or for dns how it was answered ("route", "nxdomain", "servfail"...).
	Rule string `json:"rule"`
	// Error says what went wrong when an allowed connection could not be carried (an
	// unreachable upstream, a malformed or slow request, a DNS failure); "" when nothing did.
	Error      string  `json:"error"`
	BytesUp    int64   `json:"bytes_up"`    // bytes from the sandbox
	BytesDown  int64   `json:"bytes_down"`  // bytes to the sandbox
	DurationMS float64 `json:"duration_ms"` // from arrival until the connection closed or the answer was sent
	// Secret says whether the gateway put a secret's value into the request.
	Secret bool `json:"secret"`
	// SecretMisuse says a secret's placeholder was seen where it is not bound (another host or
	// header, the URL, the body, clear text) and was sent on unchanged.
	SecretMisuse bool `json:"secret_misuse,omitempty"`
	// SecretScrubbed says the host handed a secret's value back in an answer (a header, the
	// body, a trailer), and the gateway replaced it with the placeholder before the sandbox
	// read it.
	SecretScrubbed bool `json:"secret_scrubbed,omitempty"`
	// Terminated says the gateway terminated the TLS connection because a secret is bound to
	// its host; every other HTTPS connection is tunnelled byte for byte.
	Terminated bool   `json:"terminated,omitempty"`
	QueryType  string `json:"query_type"` // dns only: the question's type ("A", "AAAA", "HTTPS", or a number)
	// Answers are the addresses a dns query was answered with.
	Answers []string `json:"answers,omitempty"`
	// Dropped is, on a record of kind dropped, how many records were lost before it because
	// the daemon could not store them fast enough.
	Dropped uint64 `json:"dropped,omitempty"`
}

// EgressKindDropped is the kind of the record that stands for records the audit log lost.
const EgressKindDropped = "dropped"

// EgressRecordList is the answer of GET /v1/sandboxes/{name}/egress/log.
type EgressRecordList struct {
	Records []EgressRecord `json:"records"`
}

// MaxEgressLogPage is the most records one GET /v1/sandboxes/{name}/egress/log returns; a larger
// limit is capped to it.
const MaxEgressLogPage = 1000

// MaxEgressLogWait is the longest a GET /v1/sandboxes/{name}/egress/log?wait=S holds the request
// open for a new record; a longer wait is capped to it.
const MaxEgressLogWait = 60 * time.Second
