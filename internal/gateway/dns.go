package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	// maxQueries bounds the queries one sandbox has in flight; beyond it a query that needs the
	// host's resolver gets SERVFAIL at once, so a sandbox cannot pile goroutines and upstream
	// lookups onto the daemon. Routed and localhost names are still answered.
	maxQueries = 64
	// maxTCPConns bounds one sandbox's open DNS-over-TCP connections; beyond it a new one is
	// closed at once.
	maxTCPConns = 16
	// lookupTimeout is under the 5 s a glibc or Go client waits per try, so the client gets our
	// SERVFAIL instead of timing out and resending into a slow upstream.
	lookupTimeout = 4 * time.Second
	// tcpIdleTimeout bounds the wait for a whole query on a TCP connection and for the client to
	// take the answer (RFC 7766 section 6.2.3 leaves the figure to the server).
	tcpIdleTimeout = 10 * time.Second

	// syntheticTTL is short because routes change with a daemon restart; answerTTL is the TTL of
	// the host resolver's answers, which do not carry their own. refusedTTL, of the address that
	// stands for a refused name, is the shortest a cache honours (0 means "use once", which some
	// treat oddly): a client that resolves again after a change of policy gets the real
	// addresses within a second.
	syntheticTTL = 5
	answerTTL    = 30
	refusedTTL   = 1

	// udpMinSize is what every client accepts over UDP (RFC 1035); ednsSize is the most the
	// resolver sends over UDP whatever the client advertises (DNS flag day 2020: one unfragmented
	// packet on any path).
	udpMinSize = 512
	ednsSize   = 1232
	tcpMaxSize = 65535
	// udpQueryMax is the largest query read over UDP.
	udpQueryMax = 4096

	// rcodeBadVers is EDNS's extended RCODE for an EDNS version the server does not speak
	// (RFC 6891 section 6.1.3).
	rcodeBadVers dnsmessage.RCode = 16
)

// Resolver is the DNS server of one sandbox, served on its loopback (UDP and TCP, DNSPort). A
// routed host (see Names) resolves to its synthetic IPv4 address and has no IPv6 address; a
// name the sandbox's egress policy refuses resolves to an address of RefusedPrefix (see
// RefusedNames) and has no IPv6 address, so that the client's connection reaches the proxy,
// which tells it why it is refused; localhost and names under .localhost resolve to the
// sandbox's own loopback (RFC 6761); other A and AAAA questions get the host resolver's
// addresses (the same lookup as the proxy's, see hostLookup), minus any in SyntheticPrefix and
// any the gateway would refuse to dial (Addrs, and the sandbox's deny rules on addresses), so a
// sandbox learns no private address by asking; other question types get an empty answer at
// once. The proxy still checks the address it dials. The zero value with Sandbox set is ready;
// a Resolver must not be copied once it serves.
type Resolver struct {
	// Names are the routed hosts; nil means none.
	Names *Names
	// Lookup asks the host's resolver for a name's addresses of both families; host is lower
	// case with no trailing dot, never a routed host or localhost. It must return when ctx is
	// done. An error that is a *net.DNSError with IsNotFound set is answered NXDOMAIN, any other
	// SERVFAIL. Nil means hostLookup, as for the proxy.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Addrs is the address policy of the sandbox's proxy: an address it refuses is left out of
	// answers (Record.Rule says "withheld: ..."). nil: the default AddrPolicy.
	Addrs *AddrPolicy
	// Audit, when set, receives a Record (kind "dns") for every query answered.
	Audit func(Record)
	// Sandbox names the sandbox in audit records.
	Sandbox string
	// Log receives a panic's stack (in Lookup, Audit or the resolver itself: it ends only that
	// query). nil: discarded.
	Log *slog.Logger
	// Policy returns the sandbox's egress policy at the time of a query; a name it refuses on
	// every port is answered with an address of Refused (Record.Rule names the rule), and an
	// address a deny rule names for every port is left out of answers. nil: every name is
	// answered.
	Policy func() *HostPolicy
	// Refused gives the names Policy refuses their addresses; the sandbox's proxy reads them
	// back. nil: a refused name is answered NXDOMAIN, which clients report as a name that does
	// not resolve.
	Refused *RefusedNames

	once    sync.Once
	queries chan struct{} // a slot per query in flight
	conns   chan struct{} // a slot per open TCP connection

	mu      sync.Mutex
	flights map[string]*flight // lookups in flight by host, shared by concurrent questions
}

// flight is one lookup in flight: a client asks for A and AAAA of the same name together, and
// both answers come from one lookup of the host's resolver.
type flight struct {
	done  chan struct{}
	addrs []netip.Addr
	err   error
}

func (r *Resolver) init() {
	r.once.Do(func() {
		r.queries = make(chan struct{}, maxQueries)
		r.conns = make(chan struct{}, maxTCPConns)
		r.flights = map[string]*flight{}
	})
}

// ServeUDP answers queries on pc until pc is closed, then returns nil once the queries in
// flight are done.
func (r *Resolver) ServeUDP(pc net.PacketConn) error {
	r.init()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// A query is a question, a few hundred bytes; one past this buffer arrives cut and fails to
	// parse. 64 KiB here was 60 KiB of sandboxd's heap per running sandbox.
	buf := make([]byte, udpQueryMax)
	var backoff time.Duration
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			backoff = retryAfter(backoff)
			continue
		}
		backoff = 0
		query := append([]byte(nil), buf[:n]...)
		select {
		case r.queries <- struct{}{}:
			wg.Go(func() {
				defer func() { <-r.queries }()
				if resp := r.safeAnswer(ctx, query, udpMinSize, false); resp != nil {
					pc.WriteTo(resp, from)
				}
			})
		default:
			// Busy: answer here without the host's resolver, which is quick.
			if resp := r.safeAnswer(ctx, query, udpMinSize, true); resp != nil {
				pc.WriteTo(resp, from)
			}
		}
	}
}

// ServeTCP answers length-prefixed queries (RFC 1035 section 4.2.2, RFC 7766) on the
// connections ln accepts, one query at a time per connection, until ln is closed; it then closes
// the open connections and returns nil once they are done.
func (r *Resolver) ServeTCP(ln net.Listener) error {
	r.init()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			backoff = retryAfter(backoff)
			continue
		}
		backoff = 0
		select {
		case r.conns <- struct{}{}:
			wg.Go(func() {
				defer func() { <-r.conns }()
				r.serveConn(ctx, c)
			})
		default:
			c.Close()
		}
	}
}

// retryAfter sleeps after a failed read or accept that is not the end (such as EMFILE), longer
// each time up to a second, so a lasting error does not spin a core.
func retryAfter(last time.Duration) time.Duration {
	next := min(max(2*last, 5*time.Millisecond), time.Second)
	time.Sleep(next)
	return next
}

func (r *Resolver) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()
	var size [2]byte
	for {
		c.SetReadDeadline(time.Now().Add(tcpIdleTimeout))
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		var resp []byte
		select {
		case r.queries <- struct{}{}:
			resp = r.safeAnswer(ctx, query, tcpMaxSize, false)
			<-r.queries
		default:
			resp = r.safeAnswer(ctx, query, tcpMaxSize, true)
		}
		if resp == nil {
			return // nothing to answer on a stream means nothing sensible follows
		}
		c.SetWriteDeadline(time.Now().Add(tcpIdleTimeout))
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}

// response is an answer being made.
type response struct {
	header   dnsmessage.Header
	rcode    dnsmessage.RCode // may be extended (over 15), then needs edns
	question *dnsmessage.Question
	answers  []netip.Addr
	ptr      string // the target of a PTR answer, when there is one
	ttl      uint32
	refused  bool // the policy refuses the name: answered, but not allowed (Record.Allowed)
	edns     bool // the query had an OPT record, so the answer has one
	limit    int  // the most bytes the client takes
}

// safeAnswer is answer for the serving goroutines: a panic ends only its query (no answer),
// not the daemon.
func (r *Resolver) safeAnswer(ctx context.Context, query []byte, limit int, busy bool) (resp []byte) {
	defer func() {
		if v := recover(); v != nil {
			resp = nil
			r.logPanic(v)
		}
	}()
	return r.answer(ctx, query, limit, busy)
}

func (r *Resolver) logPanic(v any) {
	if r.Log != nil {
		r.Log.Error("gateway: panic answering a DNS query", "sandbox", r.Sandbox, "panic", v, "stack", string(debug.Stack()))
	}
}

// maxAuditAnswers caps the addresses an audit record keeps; Record.AnswerCount has them all.
const maxAuditAnswers = 16

// answer turns one query message into one answer message, or nil for a message that deserves
// none (too short to hold an ID, or itself a response: answering those could start a loop).
// limit is the most the transport carries without EDNS (512 over UDP); busy means the host's
// resolver may not be asked.
func (r *Resolver) answer(ctx context.Context, query []byte, limit int, busy bool) []byte {
	start := time.Now()
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	m := response{
		header: dnsmessage.Header{
			ID: h.ID, Response: true, OpCode: h.OpCode, RecursionAvailable: true,
			RecursionDesired: h.RecursionDesired, CheckingDisabled: h.CheckingDisabled,
		},
		limit: limit,
	}
	rec := Record{Sandbox: r.Sandbox, Time: start, Kind: KindDNS, BytesUp: int64(len(query))}
	rec.Rule = m.parse(&p, h.OpCode)
	if m.question != nil {
		rec.Host, rec.QueryType = normalizeHost(m.question.Name.String()), typeName(m.question.Type)
	}
	if rec.Rule == "" {
		rec.Rule = r.resolve(ctx, &m, rec.Host, busy)
	}
	rcode := m.rcode
	resp := m.pack()
	if m.rcode != rcode {
		rec.Rule = "servfail" // the answer could not be packed
	}
	if r.Audit != nil {
		rec.Allowed = m.rcode == dnsmessage.RCodeSuccess && !m.refused
		rec.Answers = m.answers[:min(len(m.answers), maxAuditAnswers)]
		rec.AnswerCount = len(m.answers)
		rec.BytesDown = int64(len(resp))
		rec.Duration = time.Since(start)
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.logPanic(v)
				}
			}()
			r.Audit(rec)
		}()
	}
	return resp
}

// parse reads the question and the EDNS OPT record of a query. It returns the rule that answers
// the query at once ("formerr", "notimp", "badvers"), or "" when the question is to be resolved.
func (m *response) parse(p *dnsmessage.Parser, op dnsmessage.OpCode) string {
	if op != 0 {
		m.rcode = dnsmessage.RCodeNotImplemented // only QUERY: no NOTIFY, UPDATE, IQUERY
		return "notimp"
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		// Nobody sends several questions in one message (RFC 9619): the answer would be ambiguous.
		m.rcode = dnsmessage.RCodeFormatError
		return "formerr"
	}
	m.question = &qs[0]
	if p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		m.rcode = dnsmessage.RCodeFormatError
		return "formerr"
	}
	for {
		rh, err := p.AdditionalHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return ""
		}
		if err != nil || (rh.Type == dnsmessage.TypeOPT && m.edns) { // one OPT at most (RFC 6891 6.1.1)
			m.rcode, m.edns = dnsmessage.RCodeFormatError, false
			return "formerr"
		}
		if rh.Type == dnsmessage.TypeOPT {
			m.edns = true
			if m.limit < ednsSize { // UDP: what the client takes, up to what we send
				m.limit = min(max(int(rh.Class), udpMinSize), ednsSize)
			}
			if rh.TTL>>16&0xff != 0 {
				m.rcode = rcodeBadVers
				return "badvers"
			}
		}
		if err := p.SkipAdditional(); err != nil {
			m.rcode, m.edns = dnsmessage.RCodeFormatError, false
			return "formerr"
		}
	}
}

// resolve answers m's question for host, the question's name normalised, and returns the rule
// that answered it (see Record.Rule).
func (r *Resolver) resolve(ctx context.Context, m *response, host string, busy bool) string {
	q := m.question
	ip4, ip6 := q.Type == dnsmessage.TypeA, q.Type == dnsmessage.TypeAAAA
	switch {
	case q.Class != dnsmessage.ClassINET:
		m.rcode = dnsmessage.RCodeRefused
		return "refused"
	case isLocalhost(host):
		// The sandbox's own loopback, which a program asking for localhost expects; the proxy
		// refuses the name (the host's loopback), and the host resolver is never asked.
		m.ttl = syntheticTTL
		if ip4 {
			m.answers = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}
		} else if ip6 {
			m.answers = []netip.Addr{netip.IPv6Loopback()}
		}
		return "localhost"
	}
	var hp *HostPolicy
	if r.Policy != nil {
		hp = r.Policy()
	}
	// A name the sandbox may not reach: the host's resolver is not asked about it.
	var hd *HostDenied
	if errors.As(hp.CheckName(host), &hd) {
		r.refuse(m, host)
		return hd.Rule
	}
	if a, ok := r.Names.Addr(host); ok {
		m.ttl = syntheticTTL
		if ip4 {
			m.answers = []netip.Addr{a}
		}
		return "route" // IPv6 and other types: the name exists and has no such records
	}
	if q.Type == dnsmessage.TypePTR {
		if a, ok := reverseAddr(host); ok {
			if h, ok := r.Names.Host(a); ok {
				m.ttl, m.ptr = syntheticTTL, h+"."
				return "route"
			}
		}
	}
	if !ip4 && !ip6 {
		// MX, TXT, SRV, PTR, HTTPS, SVCB...: an empty answer now rather than a timeout, so
		// clients that ask for them first (HTTPS by browsers and curl, SRV by apt) go on to A
		// and AAAA at once.
		return ""
	}
	if !validHost(host) {
		m.rcode = dnsmessage.RCodeNameError
		return "nxdomain"
	}
	if busy {
		m.rcode = dnsmessage.RCodeServerFailure
		return "busy"
	}
	addrs, err := r.lookup(ctx, host)
	if err != nil {
		if dnsErr := (*net.DNSError)(nil); errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			m.rcode = dnsmessage.RCodeNameError
			return "nxdomain"
		}
		m.rcode = dnsmessage.RCodeServerFailure
		return "servfail"
	}
	m.ttl = answerTTL
	withheld, first := 0, ""
	for _, a := range addrs {
		// The Go resolver reports IPv4 answers as IPv4-mapped IPv6 for network "ip".
		a = a.Unmap()
		if !(a.Is4() && ip4 || a.Is6() && ip6) || r.Names.Synthetic(a) {
			continue
		}
		if why := r.refused(hp, host, a); why != "" {
			if withheld++; withheld == 1 {
				first = why
			}
			continue
		}
		m.answers = append(m.answers, a)
	}
	switch {
	case withheld == 1:
		return "withheld: " + first
	case withheld > 1:
		return fmt.Sprintf("withheld %d addresses: %s, ...", withheld, first)
	}
	return ""
}

// refuse answers a question for host, a name the sandbox's policy refuses on every port. An A
// question gets the address of RefusedPrefix that stands for it: the client connects, and the
// proxy answers with the refusal where the client shows it (a 403 and the rule for HTTP, an
// access_denied alert for TLS), where NXDOMAIN made "apt-get update" report a DNS fault and
// exit 0. Other types get an empty answer, as for a routed host: no AAAA, so the client takes
// the IPv4 address at once; no HTTPS or SRV records. NXDOMAIN stays where there is nothing to
// connect to: no Refused (a resolver on its own), and a name no client could send in a Host
// header or SNI (validHost), which the proxy never sees and the map should not hold.
func (r *Resolver) refuse(m *response, host string) {
	if r.Refused == nil || !validHost(host) {
		m.rcode = dnsmessage.RCodeNameError
		return
	}
	m.refused, m.ttl = true, refusedTTL
	if m.question.Type == dnsmessage.TypeA {
		m.answers = []netip.Addr{r.Refused.Addr(host)}
	}
}

// refused says why the proxy would refuse to dial a, an address host resolved to, on every
// port, for the audit; "" if it would not.
func (r *Resolver) refused(hp *HostPolicy, host string, a netip.Addr) string {
	var d *Denied
	if errors.As(r.Addrs.Check(a), &d) {
		d.Host = host
		return d.auditText()
	}
	var hd *HostDenied
	if errors.As(hp.CheckAddr(host, a, 0), &hd) {
		return host + " resolves to " + a.String() + ", " + hd.Rule
	}
	return ""
}

// isLocalhost reports whether host (normalised) is localhost or a name under .localhost, which
// RFC 6761 section 6.3 makes loopback: the resolver answers the sandbox's own loopback and the
// proxy refuses it as the host's, so the name means the same to both and the host's resolver
// and /etc/hosts never decide it.
func isLocalhost(host string) bool {
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// lookup asks the host's resolver, with a timeout, joining a lookup of the same host already in
// flight.
func (r *Resolver) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	r.mu.Lock()
	f, joined := r.flights[host]
	if !joined {
		f = &flight{done: make(chan struct{})}
		r.flights[host] = f
	}
	r.mu.Unlock()
	if joined {
		select {
		case <-f.done:
			return f.addrs, f.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	lookup := r.Lookup
	if lookup == nil {
		lookup = hostLookup
	}
	func() {
		// A panic still ends the flight: the questions joined to it must not wait for ever.
		defer func() {
			if v := recover(); v != nil {
				f.addrs, f.err = nil, fmt.Errorf("internal error: %v", v)
				r.logPanic(v)
			}
		}()
		f.addrs, f.err = lookup(ctx, host)
	}()
	r.mu.Lock()
	delete(r.flights, host)
	r.mu.Unlock()
	close(f.done)
	return f.addrs, f.err
}

// hostLookup is the default Lookup of the resolver and of the proxy, so a name resolves the same
// for both: the daemon's own resolver, asked for the absolute name (a trailing dot), which both
// Go's resolver and glibc's look up in DNS alone. Neither the host's search list nor its
// /etc/hosts applies: the sandbox's client already applied its own search list, and the host's
// names are the host's. A variable only so that a test can see who asks it.
var hostLookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host+".")
}

// pack builds m within m.limit bytes. An answer too long for it goes out with TC set and no
// records, so the client asks again over TCP (RFC 2181 section 9); one that cannot be packed at
// all (a routed host too long to be a DNS name) becomes SERVFAIL.
func (m *response) pack() []byte {
	if b, err := m.build(true); err == nil && len(b) <= m.limit {
		return b
	} else if err == nil {
		m.header.Truncated = true
	} else {
		m.rcode = dnsmessage.RCodeServerFailure
	}
	m.answers, m.ptr = nil, ""
	if b, err := m.build(false); err == nil && len(b) <= m.limit {
		return b
	}
	// Unreachable with a question that was parsed from the query, but never answer nothing.
	m.question, m.edns = nil, false
	b, _ := m.build(false)
	return b
}

func (m *response) build(records bool) ([]byte, error) {
	h := m.header
	h.RCode = m.rcode & 0xf // the rest goes in the OPT record
	b := dnsmessage.NewBuilder(make([]byte, 0, udpMinSize), h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if m.question != nil {
		if err := b.Question(*m.question); err != nil {
			return nil, err
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if records && m.question != nil {
		rh := dnsmessage.ResourceHeader{Name: m.question.Name, Class: dnsmessage.ClassINET, TTL: m.ttl}
		for _, a := range m.answers {
			var err error
			if a.Is4() {
				rh.Type = dnsmessage.TypeA
				err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			} else {
				rh.Type = dnsmessage.TypeAAAA
				err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
			if err != nil {
				return nil, err
			}
		}
		if m.ptr != "" {
			name, err := dnsmessage.NewName(m.ptr)
			if err != nil {
				return nil, err
			}
			rh.Type = dnsmessage.TypePTR
			if err := b.PTRResource(rh, dnsmessage.PTRResource{PTR: name}); err != nil {
				return nil, err
			}
		}
	}
	if err := b.StartAdditionals(); err != nil {
		return nil, err
	}
	if m.edns {
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(ednsSize, m.rcode, false)
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// reverseAddr reads the IPv4 address of a name under in-addr.arpa.
func reverseAddr(host string) (netip.Addr, bool) {
	rev, ok := strings.CutSuffix(host, ".in-addr.arpa")
	if !ok {
		return netip.Addr{}, false
	}
	l := strings.Split(rev, ".")
	if len(l) != 4 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(l[3] + "." + l[2] + "." + l[1] + "." + l[0])
	return a, err == nil
}

// validHost reports whether host is a name worth asking the host's resolver: letters, digits,
// hyphens and underscores in labels of at most 63 bytes, 253 in all. A packet may carry any
// byte in a name; the host's resolver (and /etc/hosts) should not see those.
func validHost(host string) bool {
	if host == "" || len(host) > 253 {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// typeName is the usual name of a query type: "A", "AAAA", "HTTPS", or its number.
func typeName(t dnsmessage.Type) string {
	return strings.TrimPrefix(t.String(), "Type")
}
