package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of the Proxy's limits.
const (
	DefaultHeaderTimeout    = 10 * time.Second
	DefaultFirstByteTimeout = 300 * time.Millisecond
	DefaultDialTimeout      = 30 * time.Second
	DefaultIdleTimeout      = time.Hour
	DefaultMaxConns         = 4096
)

// Proxy decides and carries one sandbox's TCP connections: those its capture redirects to the
// gateway's listener and those made to the same listener as an explicit HTTP proxy. Set the
// fields before the first Serve or ServeConn and leave them alone after.
type Proxy struct {
	Sandbox string  // the sandbox's name, for the audit records
	Routes  []Route // sandboxd --gateway-resolve

	// SyntheticHost names the routed host behind a synthetic address (198.18.0.0/15) the
	// gateway's resolver handed out. nil: there are none.
	SyntheticHost func(netip.Addr) (string, bool)
	// Refused names the names the sandbox's resolver refused, by the addresses of
	// RefusedPrefix it answered them with (Resolver.Refused). A connection to such an address
	// that names a host (SNI, Host) is decided by that name, as every connection is; one that
	// names none is refused (refusedAddr). nil: none known, and such a connection is refused
	// without a name.
	Refused *RefusedNames
	// OriginalDst returns where a captured connection was going (SO_ORIGINAL_DST). A
	// connection whose original destination is the listener's own address, or for which
	// OriginalDst fails, was made to the explicit proxy. nil: every connection is.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Policy checks every address dialled except a route's. nil: the default AddrPolicy.
	Policy *AddrPolicy
	// Lookup resolves a host name on the host. nil: the resolver's own lookup (hostLookup:
	// absolute names, no search list, no /etc/hosts), so a name means the same to both.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to an upstream address from the host. nil: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Audit receives a Record for every connection (when it ends; a denial at once) and every
	// request forwarded by the explicit proxy. It must not block for long. nil: none.
	Audit func(Record)
	// Log receives what the audit does not cover: a panic's stack. nil: discarded.
	Log *slog.Logger

	// Secrets returns the bindings to consider for a connection to host: at least those
	// bound to host; it may return the sandbox's others too, so that their placeholders are
	// recognised as misuse where the gateway reads requests. It is called when a connection
	// arrives and again for each request it carries, so detaching and rotating apply at once.
	// A TLS connection to a host some binding names is terminated with a leaf from CA (see
	// terminate.go); every other connection is carried byte for byte. nil, or a nil CA: none.
	Secrets func(host string) []Binding
	// CA mints the leaves for terminated connections.
	CA *CA
	// UpstreamCAs are trusted, besides the host's trust store, to verify the real hosts of
	// terminated connections (sandboxd --gateway-upstream-ca). nil: the host's store alone.
	UpstreamCAs *x509.CertPool

	HeaderTimeout    time.Duration // for a request head or ClientHello; 0: DefaultHeaderTimeout
	FirstByteTimeout time.Duration // before a silent client is taken as server-speaks-first; 0: DefaultFirstByteTimeout
	DialTimeout      time.Duration // resolving and connecting upstream; 0: DefaultDialTimeout
	IdleTimeout      time.Duration // a connection with no byte either way is closed; 0: DefaultIdleTimeout
	MaxConns         int           // connections at once, over it a reset; 0: DefaultMaxConns
	// Budget bounds the connections of every sandbox together (sandboxd --gateway-max-conns);
	// the proxies of all sandboxes share it. nil: MaxConns alone.
	Budget *Budget
	// ModelRoute serves the origin-form requests to the proxy whose path it handles (the
	// harnesses' base URLs point at the proxy's own address); nil: none.
	ModelRoute ModelRoute

	hostPolicy atomic.Pointer[HostPolicy] // the sandbox's egress policy; nil: open, no rules

	initOnce  sync.Once
	ctx       context.Context // ends at Close: no dial outlives the Proxy
	cancel    context.CancelFunc
	server    *http.Server // the explicit proxy
	transport *http.Transport
	forwarder *httputil.ReverseProxy

	share *share // of Budget

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	upConns   map[*idleConn]struct{} // the forwarding transports' upstream connections
}

// The forwarding transports' pools: a sandbox cannot make the gateway hold many upstream
// connections idle.
const (
	maxIdleConns        = 32
	maxIdleConnsPerHost = 4
	idleConnTimeout     = 30 * time.Second
)

// forwardCtx bounds a forwarding transport's dial: by the dial timeout and by the Proxy's
// life (the transport dials with a context of its own, not the request's).
func (p *Proxy) forwardCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout())
	stop := context.AfterFunc(p.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// track makes c, an upstream connection of a forwarding transport, one Close closes; a
// connection that completes after Close is closed at once.
func (p *Proxy) track(c net.Conn) (*idleConn, error) {
	ic := &idleConn{Conn: c, idle: p.idleTimeout(), p: p}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return nil, ErrProxyClosed
	}
	p.upConns[ic] = struct{}{}
	return ic, nil
}

// SetHostPolicy makes hp the sandbox's egress policy (nil: open, no rules). It may be called at
// any time: connections and requests decided from then on follow it, those already carried
// (an open tunnel, a spliced connection) go on.
func (p *Proxy) SetHostPolicy(hp *HostPolicy) { p.hostPolicy.Store(hp) }

// HostPolicy returns the sandbox's egress policy; nil: open, no rules.
func (p *Proxy) HostPolicy() *HostPolicy { return p.hostPolicy.Load() }

// decide applies the sandbox's egress policy hp to host (a name, or an address asked for
// directly) and port. An address the gateway's resolver handed out for a routed host is decided
// by that host's name; one it answered a refused name with is refused (refusedAddr).
func (p *Proxy) decide(hp *HostPolicy, host string, port uint16) error {
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if RefusedPrefix.Contains(a) {
			return p.refusedAddr(hp, a, port)
		}
		if name, ok := p.syntheticHost(a); ok {
			host = name
		}
	}
	return hp.Check(host, port)
}

// refusedAddr is the refusal of a connection to port of a, an address of RefusedPrefix, that
// names no host of its own (no SNI, no Host: a raw TCP protocol, or HTTP/1.0). It is refused
// whatever the policy says now: a stands for the refusal the resolver answered, and the name
// behind it may have been handed a's address since that answer (RefusedNames recycles them), so
// dialling that name could carry the client's bytes to a host it never asked for. It names the
// rule that refuses the name now, or, if the policy allows the name now, says to resolve it
// again (the answer's TTL is a second).
func (p *Proxy) refusedAddr(hp *HostPolicy, a netip.Addr, port uint16) error {
	name, ok := p.Refused.Host(a)
	if !ok {
		return &HostDenied{Host: a.String(), Port: port,
			Rule: "an address the gateway's resolver gives names the egress policy refuses (" + RefusedPrefix.String() + "); which name it stood for is no longer known"}
	}
	if err := hp.Check(name, port); err != nil {
		return err
	}
	return &HostDenied{Host: name, Port: port,
		Rule: "its address " + a.String() + " stood for its refusal when it was resolved; the egress policy allows it now: resolve it again"}
}

// ErrProxyClosed is returned by Serve after Close.
var ErrProxyClosed = errors.New("gateway: proxy closed")

func (p *Proxy) init() {
	p.initOnce.Do(func() {
		p.ctx, p.cancel = context.WithCancel(context.Background())
		p.listeners = map[net.Listener]struct{}{}
		p.conns = map[net.Conn]struct{}{}
		p.upConns = map[*idleConn]struct{}{}
		budget := p.Budget
		if budget == nil {
			budget = &Budget{} // MaxConns alone
		}
		p.share = budget.join(p.maxConns())
		p.transport = &http.Transport{
			DialContext:            p.dialForward,
			MaxIdleConns:           maxIdleConns,
			MaxIdleConnsPerHost:    maxIdleConnsPerHost,
			IdleConnTimeout:        idleConnTimeout,
			MaxResponseHeaderBytes: maxHead, // an upstream's headers are held in memory whole
			ResponseHeaderTimeout:  p.idleTimeout(),
			ExpectContinueTimeout:  time.Second,
			DisableCompression:     true, // the client's Accept-Encoding goes upstream as it is
		}
		p.forwarder = &httputil.ReverseProxy{
			Rewrite:       forwardRewrite,
			Transport:     p.transport,
			FlushInterval: -1, // streamed responses (server-sent events, long polls) flow as they come
			ErrorHandler:  p.forwardError,
			ErrorLog:      log.New(io.Discard, "", 0),
		}
		p.server = &http.Server{
			Handler:           http.HandlerFunc(p.serveHTTP),
			ReadHeaderTimeout: p.headerTimeout(),
			IdleTimeout:       p.idleTimeout(),
			MaxHeaderBytes:    maxHead,
			ErrorLog:          log.New(io.Discard, "", 0),
			BaseContext:       func(net.Listener) context.Context { return p.ctx },
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				return context.WithValue(ctx, explicitKey{}, c)
			},
		}
	})
}

func (p *Proxy) headerTimeout() time.Duration {
	return orDefault(p.HeaderTimeout, DefaultHeaderTimeout)
}
func (p *Proxy) firstTimeout() time.Duration {
	return orDefault(p.FirstByteTimeout, DefaultFirstByteTimeout)
}
func (p *Proxy) dialTimeout() time.Duration { return orDefault(p.DialTimeout, DefaultDialTimeout) }
func (p *Proxy) idleTimeout() time.Duration { return orDefault(p.IdleTimeout, DefaultIdleTimeout) }
func (p *Proxy) maxConns() int              { return orDefault(p.MaxConns, DefaultMaxConns) }

func orDefault[T time.Duration | int](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Serve accepts connections on ln and serves each in its own goroutine until ln is closed (it
// then returns nil) or Close is called (ErrProxyClosed).
func (p *Proxy) Serve(ln net.Listener) error {
	p.init()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrProxyClosed
	}
	p.listeners[ln] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, ln)
		p.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			switch {
			case closed:
				return ErrProxyClosed
			case errors.Is(err, net.ErrClosed):
				return nil
			case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
				errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM):
				// Out of descriptors or memory for now: wait for connections to end.
				backoff = retryAfter(backoff)
				continue
			}
			return err
		}
		backoff = 0
		go p.ServeConn(c)
	}
}

// Close stops every Serve, closes every connection the Proxy holds and makes later
// connections fail at once. It does not close listeners Serve is not running on.
func (p *Proxy) Close() error {
	p.init()
	p.share.leave()
	p.mu.Lock()
	p.closed = true
	p.cancel()
	var closers []io.Closer
	for ln := range p.listeners {
		closers = append(closers, ln)
	}
	for c := range p.conns {
		closers = append(closers, c)
	}
	for c := range p.upConns {
		closers = append(closers, c)
	}
	p.mu.Unlock()
	for _, c := range closers {
		c.Close()
	}
	p.server.Close()
	p.transport.CloseIdleConnections()
	return nil
}

// ServeConn serves one connection accepted on the gateway's listener and returns when it is
// done. A panic in it is recovered, audited and ends only this connection.
func (p *Proxy) ServeConn(c net.Conn) {
	p.init()
	rec := Record{Sandbox: p.Sandbox, Time: time.Now(), Kind: KindTCP}
	var s *slot
	p.mu.Lock()
	if p.closed {
		rec.Err = "the gateway is closed"
	} else if taken, err := p.share.take(c); err != nil {
		rec.Err = err.Error() // the sandbox's own limit or the daemon's
	} else {
		s = taken
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if rec.Err != "" {
		reset(c)
		p.audit(rec)
		return
	}

	emit := true // unless the record went out already
	func() {
		defer func() {
			if v := recover(); v != nil {
				reset(c)
				rec.Err = fmt.Sprintf("internal error: %v", v)
				p.logPanic(v)
			}
		}()
		emit = p.serveConn(c, &rec)
	}()
	c.Close()
	// The slot is free before the record says the connection ended.
	p.mu.Lock()
	delete(p.conns, c)
	if shed := s.release(); shed != "" {
		rec.Err = shed
	}
	p.mu.Unlock()
	if emit {
		rec.Duration = time.Since(rec.Time)
		p.audit(rec)
	}
}

// serveConn serves c and fills rec; it reports whether rec is still to be emitted.
func (p *Proxy) serveConn(c net.Conn, rec *Record) bool {
	local := addrPortOf(c.LocalAddr())
	if p.OriginalDst == nil {
		return p.serveExplicit(c, rec)
	}
	dst, err := p.OriginalDst(c)
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if err != nil || dst == local {
		return p.serveExplicit(c, rec)
	}
	return p.serveTransparent(c, dst, rec)
}

// serveTransparent carries a captured connection to where it was going: the SNI or Host it
// names, else the routed host behind a synthetic address, else its original destination. It
// reports whether rec is still to be emitted.
func (p *Proxy) serveTransparent(c net.Conn, dst netip.AddrPort, rec *Record) bool {
	rec.Port = dst.Port()
	synthetic, _ := p.syntheticHost(dst.Addr())
	h, err := sniff(c, p.firstTimeout(), p.headerTimeout())
	rec.Kind = h.kind
	if err != nil {
		rec.Err = err.Error()
		var he *headError
		if h.kind == KindHTTP && errors.As(err, &he) {
			p.answer(c, he.status, he.msg, rec)
			return false
		}
		reset(c)
		return true
	}
	host := h.host
	if host == "" {
		host = synthetic
	}
	rec.Host = host
	if host == "" {
		rec.Host, _ = p.Refused.Host(dst.Addr()) // the refused name the address stands for, if any
		host = dst.Addr().String()
	}
	if h.ech {
		if err := p.HostPolicy().CheckECH(host, dst.Port()); err != nil {
			p.refusal(err, rec)
			p.refuseTLS(c, h.head, rec)
			return false
		}
	}
	if h.kind == KindHTTP {
		// Every request of a kept-alive or pipelined connection is decided by its own Host:
		// the connection is served by the same per-request forwarder as the explicit proxy,
		// not spliced after its first request.
		fallback := synthetic
		if fallback == "" {
			fallback = dst.Addr().String()
		}
		ec := &explicitConn{Conn: &prefixConn{Conn: c, prefix: h.head}, closed: make(chan struct{}),
			captured: true, port: dst.Port(), fallback: fallback}
		return p.serveHTTPConn(ec, rec, KindHTTP)
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout())
	up, err := p.dial(ctx, host, dst.Port())
	cancel()
	rec.Addr, rec.Rule = up.addr, up.route
	if err != nil {
		p.refusal(err, rec)
		if h.kind == KindTLS && !rec.Allowed {
			p.refuseTLS(c, h.head, rec)
			return false
		}
		// Refused without a way to say why, or an upstream that cannot be reached: a reset,
		// which a client takes as it would from the host itself (and tries its next address).
		reset(c)
		return true
	}
	defer up.conn.Close()
	rec.Allowed = true
	// Secrets (terminate.go): TLS to a host with a secret bound to it is terminated; a
	// placeholder in a request head carried in clear is audited.
	switch {
	case h.kind == KindTLS && p.bound(host):
		p.serveTerminated(c, h.head, normalHost(host), dst.Port(), up.conn, rec)
		return true
	}
	if len(h.head) > 0 {
		up.conn.SetWriteDeadline(time.Now().Add(p.idleTimeout()))
		n, err := up.conn.Write(h.head)
		rec.BytesUp += int64(n)
		if err != nil {
			rec.Err = "upstream: " + err.Error()
			reset(c)
			return true
		}
	}
	bytesUp, bytesDown, err := p.splice(c, up.conn)
	rec.BytesUp += bytesUp
	rec.BytesDown = bytesDown
	if err != nil {
		rec.Err = err.Error()
	}
	return true
}

// upstream is a connection the gateway dialled for a sandbox.
type upstream struct {
	conn  net.Conn
	addr  netip.AddrPort // dialled, or refused
	route string         // the route used, "" if none
}

// dial connects to host:port for the sandbox: by a route, else to an address literal the
// policies allow, else to the first address host resolves to that the policies allow and that
// answers. A destination the sandbox's HostPolicy refuses is a *HostDenied, a refused address
// a *Denied; a failure to resolve or to connect is an *upstreamError. upstream.addr is set on
// failure too, when an address was chosen.
func (p *Proxy) dial(ctx context.Context, host string, port uint16) (upstream, error) {
	// The sandbox's policy first: by name when there is one, else by the address asked for.
	hp := p.HostPolicy()
	if err := p.decide(hp, host, port); err != nil {
		return upstream{}, err
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		name, ok := p.syntheticHost(a)
		if !ok {
			ap := netip.AddrPortFrom(a, port)
			if err := p.Policy.Check(a); err != nil {
				return upstream{addr: ap}, err
			}
			if err := hp.CheckAddr("", a, port); err != nil {
				return upstream{addr: ap}, err
			}
			c, err := p.dialAddr(ctx, host, port, ap)
			return upstream{conn: c, addr: ap}, err
		}
		host = name
	}
	if isLocalhost(host) {
		// RFC 6761: loopback, whatever the host's resolver or a route says; in the sandbox the
		// resolver answers its own loopback, so here it can only mean the host's.
		lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
		return upstream{addr: netip.AddrPortFrom(lo, port)}, &Denied{Addr: lo, Host: host, Rule: ruleLoopback, hostOnly: true}
	}
	for _, r := range p.Routes {
		if r.Host == host && r.Port == port {
			c, err := p.dialAddr(ctx, host, port, r.To)
			return upstream{conn: c, addr: r.To, route: fmt.Sprintf("route %s:%d=%s", r.Host, r.Port, r.To)}, err
		}
	}
	lookup := p.Lookup
	if lookup == nil {
		lookup = hostLookup // the resolver's: the name means the same to the sandbox and here
	}
	addrs, err := lookup(ctx, host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) {
			err = errors.New(de.Err) // its Error repeats the name
		}
		return upstream{}, &upstreamError{msg: fmt.Sprintf("cannot resolve %s: %v", host, err), err: err}
	}
	var refused error // the first refusal of an address host resolved to
	var failed upstream
	var dialErr error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), port)
		// The address ranges, then the sandbox's deny rules on addresses: a name is refused
		// where the address it resolves to is.
		err := p.Policy.Check(ap.Addr())
		var d *Denied
		if errors.As(err, &d) {
			d.Host = host
		} else if err == nil {
			err = hp.CheckAddr(host, ap.Addr(), port)
		}
		if err != nil {
			if refused == nil {
				refused, failed.addr = err, ap
			}
			continue
		}
		c, err := p.dialAddr(ctx, host, port, ap)
		if err == nil {
			return upstream{conn: c, addr: ap}, nil
		}
		failed.addr, dialErr = ap, err
		if ctx.Err() != nil {
			break
		}
	}
	switch {
	case dialErr != nil:
		return failed, dialErr
	case refused == nil:
		return failed, &upstreamError{msg: fmt.Sprintf("cannot resolve %s: no usable address", host)}
	}
	return failed, refused
}

// dialAddr connects to ap for host:port, and says so in its error.
func (p *Proxy) dialAddr(ctx context.Context, host string, port uint16, ap netip.AddrPort) (net.Conn, error) {
	dial := p.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	c, err := dial(ctx, "tcp", ap.String())
	if err != nil {
		reason := err.Error()
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			reason = "connection refused"
		case errors.Is(err, syscall.ECONNRESET):
			reason = "connection reset"
		case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
			reason = "no route to host"
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			reason = fmt.Sprintf("timed out after %s", p.dialTimeout())
		}
		target := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if target != ap.String() {
			target += " (" + ap.String() + ")"
		}
		return nil, &upstreamError{msg: fmt.Sprintf("cannot connect to %s: %s", target, reason), err: err}
	}
	return c, nil
}

// upstreamError is a failure to reach an allowed destination: the sandbox gets a 502.
type upstreamError struct {
	msg string
	err error
}

func (e *upstreamError) Error() string { return e.msg }
func (e *upstreamError) Unwrap() error { return e.err }

// refusal turns a dial error into the HTTP status and text a client gets, and records it. The
// text names the host and the rule, never an address a name resolved to; the record keeps it.
func (p *Proxy) refusal(err error, rec *Record) (int, string) {
	var hd *HostDenied
	if errors.As(err, &hd) {
		rec.Allowed = false
		rec.Rule = hd.Rule
		return http.StatusForbidden, fmt.Sprintf("%s (the sandbox's egress policy: `hiloop sandbox egress %s` shows and changes it)", hd.Error(), p.Sandbox)
	}
	var d *Denied
	if errors.As(err, &d) {
		rec.Allowed = false
		rec.Rule = d.auditText()
		return http.StatusForbidden, d.Error() + "; " + d.hint()
	}
	rec.Allowed = true
	rec.Err = err.Error()
	return http.StatusBadGateway, err.Error()
}

// answer writes a short plain-text HTTP response to a captured client and ends the connection.
// The record goes out at once, before the client has been given time to read the answer.
func (p *Proxy) answer(c net.Conn, status int, msg string, rec *Record) {
	rec.Duration = time.Since(rec.Time)
	p.audit(*rec)
	body := "hiloop gateway: " + msg + "\n"
	c.SetWriteDeadline(time.Now().Add(p.headerTimeout()))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	lingerClose(c)
}

// alertAccessDenied is TLS's access_denied alert (RFC 8446 section 6.2: access control was
// applied and the sender decided not to proceed), the one a refused ClientHello gets. Clients
// print it as what it is: OpenSSL's (curl, Node, Python, apt) "tlsv1 alert access denied", Go's
// "remote error: tls: access denied". handshake_failure (40), the other candidate, reads as a
// cipher or version mismatch and sends people looking for one.
const alertAccessDenied = 49

// refuseTLS answers a refused ClientHello (hello: the bytes of its records, as sniffed) with a
// fatal access_denied alert and ends the connection. The record goes out at once, as with answer.
func (p *Proxy) refuseTLS(c net.Conn, hello []byte, rec *Record) {
	rec.Duration = time.Since(rec.Time)
	p.audit(*rec)
	p.sendAlert(c, hello)
}

// sendAlert writes a fatal access_denied alert record in the clear, as a server does before its
// ServerHello, and closes c. The record's version is the one the ClientHello asked for, at
// most TLS 1.2's 3.3, which TLS 1.3 puts in every record (RFC 8446 section 5.1); an old client
// that asked for 3.1 would drop a 3.3 record unread.
func (p *Proxy) sendAlert(c net.Conn, hello []byte) {
	minor := byte(3)
	// hello: a record header (5 bytes), the handshake header (4), then legacy_version.
	if len(hello) > 10 && hello[9] == 3 && hello[10] < minor {
		minor = hello[10]
	}
	c.SetWriteDeadline(time.Now().Add(p.headerTimeout()))
	c.Write([]byte{21, 3, minor, 0, 2, 2, alertAccessDenied}) // alert, version, length 2, fatal
	lingerClose(c)
}

// lingerClose closes c after its peer has had a moment to read what was written: closing with
// unread request bytes in the receive buffer would make the kernel send a reset that can
// destroy the answer before the client reads it.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		io.CopyN(io.Discard, c, 256<<10)
	}
	c.Close()
}

// reset ends c with a TCP reset: a refusal where the protocol has no way to say why.
func reset(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		l.SetLinger(0)
	}
	c.Close()
}

// spliceChunk is how many bytes one direction of a splice copies between deadline renewals;
// on Linux a TCP-to-TCP copy moves them with splice(2), without copying through user space.
const spliceChunk = 1 << 20

// splice copies bytes both ways between the sandbox's connection and upstream until both
// directions end. When one side finishes sending, the other side's write half is closed, so
// request/response protocols that half-close work. A connection with no byte in either
// direction for IdleTimeout is closed. It returns the bytes copied each way and the error
// that ended it, nil for a clean end.
func (p *Proxy) splice(client, up net.Conn) (bytesUp, bytesDown int64, err error) {
	idle := p.idleTimeout()
	var last atomic.Int64 // when a byte last moved, either way
	last.Store(time.Now().UnixNano())
	copyOne := func(dst, src net.Conn, n *int64) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("internal error: %v", v)
				p.logPanic(v)
			}
		}()
		for {
			// A read that times out loses nothing and may be retried; a write that times out
			// may have lost bytes in flight, so it ends the splice. The write deadline is the
			// later one, so a timeout before it was the read's.
			now := time.Now()
			src.SetReadDeadline(now.Add(idle))
			writeDeadline := now.Add(2 * idle)
			// Wait for bytes first, then copy what is queued (at least one, which reads the
			// end of the stream): the copy holds a splice pipe only while it moves bytes.
			queued, err := waitQueued(src)
			var k int64
			if err == nil {
				dst.SetWriteDeadline(writeDeadline)
				k, err = io.CopyN(dst, src, min(max(queued, 1), spliceChunk))
			}
			*n += k
			if k > 0 {
				last.Store(time.Now().UnixNano())
			}
			switch {
			case err == nil:
			case errors.Is(err, io.EOF):
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
				return nil
			case isTimeout(err) && time.Now().After(writeDeadline):
				return fmt.Errorf("stalled: the receiver took nothing for %s", 2*idle)
			case isTimeout(err) && time.Since(time.Unix(0, last.Load())) < idle:
				// This way was quiet, the other was not.
			case isTimeout(err):
				return fmt.Errorf("idle for %s", idle)
			default:
				return err
			}
		}
	}
	// A peer that resets the connection (a server that closed first, then got the client's TLS
	// close_notify) is gone either way. The other direction is given a moment to end by itself:
	// when it ends cleanly the reset was only the end of the conversation, not a failure. Any
	// other error closes both sides at once.
	var closeOnce sync.Once
	closeBoth := func() {
		closeOnce.Do(func() {
			client.Close()
			up.Close()
		})
	}
	ended := func(err error) {
		switch {
		case err == nil:
		case peerReset(err):
			time.AfterFunc(resetGrace, closeBoth)
		default:
			closeBoth()
		}
	}
	errc := make(chan error, 1)
	go func() {
		err := copyOne(client, up, &bytesDown)
		ended(err)
		errc <- err
	}()
	errUp := copyOne(up, client, &bytesUp)
	ended(errUp)
	errDown := <-errc
	switch {
	case errUp == nil && (errDown == nil || peerReset(errDown)):
		return bytesUp, bytesDown, nil
	case errDown == nil && peerReset(errUp):
		return bytesUp, bytesDown, nil
	case errUp != nil:
		return bytesUp, bytesDown, errUp
	}
	return bytesUp, bytesDown, errDown
}

// resetGrace is how long the other direction of a splice may take to end by itself after one
// direction's peer reset.
const resetGrace = time.Second

// peerReset reports whether a write failed because its receiver had gone (RST or EPIPE).
func peerReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (p *Proxy) syntheticHost(a netip.Addr) (string, bool) {
	if p.SyntheticHost == nil {
		return "", false
	}
	return p.SyntheticHost(a)
}

func (p *Proxy) audit(r Record) {
	if p.Audit == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			p.logPanic(v)
		}
	}()
	p.Audit(r)
}

func (p *Proxy) logPanic(v any) {
	if p.Log != nil {
		p.Log.Error("gateway: panic serving a connection", "sandbox", p.Sandbox, "panic", v, "stack", string(debug.Stack()))
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// The explicit proxy: an HTTP/1.1 forward proxy (absolute-form requests) and CONNECT, served
// by net/http on connections handed to it one at a time.

type explicitKey struct{}

// explicitConn is a connection served by the explicit proxy's http.Server. It tells ServeConn
// when the server is done with it, and what the server answered if no request reached the
// handler (a malformed or oversized request).
type explicitConn struct {
	net.Conn
	// A captured plain-HTTP connection (or one inside a CONNECT tunnel) is served by the same
	// server: its origin-form requests go to port, to the host their Host names (fallback
	// when they name none). pin: the CONNECT host every request must name.
	captured bool
	port     uint16
	fallback string
	pin      string

	requests  atomic.Int64 // requests that reached the handler
	read      atomic.Int64
	mu        sync.Mutex
	answer    []byte // the start of what the server wrote before any request reached the handler
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *explicitConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *explicitConn) Write(b []byte) (int, error) {
	if c.requests.Load() == 0 {
		c.mu.Lock()
		if len(c.answer) < 512 {
			c.answer = append(c.answer, b[:min(len(b), 512-len(c.answer))]...)
		}
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *explicitConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		err = c.Conn.Close()
		close(c.closed)
	})
	return err
}

func (c *explicitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// oneConnListener hands its connection to http.Server.Serve once, then ends Serve.
type oneConnListener struct {
	c    net.Conn
	once sync.Once
	took bool
}

func (l *oneConnListener) Accept() (c net.Conn, err error) {
	err = net.ErrClosed
	l.once.Do(func() { c, err, l.took = l.c, nil, true })
	return c, err
}
func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// serveExplicit hands c to the explicit proxy's server and waits until the server is done
// with it. Every request is audited by the handler; a connection on which none reached the
// handler is audited here.
func (p *Proxy) serveExplicit(c net.Conn, rec *Record) bool {
	return p.serveHTTPConn(&explicitConn{Conn: c, closed: make(chan struct{})}, rec, KindProxyHTTP)
}

// serveHTTPConn serves ec with the proxy's HTTP server until the server is done with it. A
// connection on which no request reached the handler is recorded in rec (as kind); it
// reports whether rec is still to be emitted.
func (p *Proxy) serveHTTPConn(ec *explicitConn, rec *Record, kind string) bool {
	l := &oneConnListener{c: ec}
	p.server.Serve(l)
	if !l.took {
		rec.Err = "the gateway is closed"
		return true
	}
	<-ec.closed
	if ec.requests.Load() > 0 {
		return false
	}
	rec.Kind = kind
	ec.mu.Lock()
	answer := string(ec.answer)
	ec.mu.Unlock()
	switch status, body, _ := strings.Cut(answer, "\r\n\r\n"); {
	case answer != "":
		status = strings.TrimPrefix(strings.TrimPrefix(strings.SplitN(status, "\r\n", 2)[0], "HTTP/1.1 "), "HTTP/1.0 ")
		rec.Err = "bad request: " + status
		if body = strings.TrimSpace(body); body != "" && body != status {
			rec.Err += ": " + body
		}
	case ec.read.Load() == 0:
		rec.Err = "closed without a request"
	case time.Since(rec.Time) >= p.headerTimeout():
		rec.Err = fmt.Sprintf("no complete request head within %s", p.headerTimeout())
	default:
		rec.Err = "closed inside a request head"
	}
	return true
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ec := r.Context().Value(explicitKey{}).(*explicitConn)
	ec.requests.Add(1)
	rec := Record{Sandbox: p.Sandbox, Time: time.Now(), Kind: KindProxyHTTP}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				// httputil's way of saying a response broke off midway.
				rec.Err = "the response broke off"
			} else {
				rec.Err = fmt.Sprintf("internal error: %v", v)
				p.logPanic(v)
			}
			rec.Duration = time.Since(rec.Time)
			p.audit(rec)
			panic(http.ErrAbortHandler) // the server closes the connection quietly
		}
	}()
	switch {
	case ec.captured:
		rec.Kind = KindHTTP
		p.captured(w, r, ec, &rec)
	case r.Method == http.MethodConnect:
		rec.Kind = KindConnect
		p.connect(w, r, ec, &rec)
	case r.URL.IsAbs():
		p.forward(w, r, &rec)
	case p.ModelRoute != nil && p.ModelRoute.Handles(r.URL.Path):
		p.serveModelRoute(w, r, &rec)
	default:
		rec.Err = "an origin-form request to the proxy: " + r.Method + " " + r.RequestURI
		plainError(w, http.StatusBadRequest, fmt.Sprintf("this is the sandbox's egress proxy (%s); send it absolute-form requests (GET http://host/path) or CONNECT host:port, not %s %s",
			ProxyURL, r.Method, r.RequestURI))
	}
	rec.Duration = time.Since(rec.Time)
	p.audit(rec)
}

// ModelRoute is the model route a proxy serves on its own address: the provider APIs under
// the prefixes it Handles, with the provider's credential swapped in (internal/modelroute).
type ModelRoute interface {
	http.Handler
	// Handles reports whether an origin-form request for path is the route's.
	Handles(path string) bool
}

// KindModelRoute is the kind of the record of a request to the model route.
const KindModelRoute = "model-route"

// serveModelRoute serves one request of the model route and records it: the route's own
// errors (its X-Hiloop-Error header) as the record's error.
func (p *Proxy) serveModelRoute(w http.ResponseWriter, r *http.Request, rec *Record) {
	rec.Kind = KindModelRoute
	rec.Host = strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)[0]
	rec.Rule = "model route"
	cw := &countingWriter{ResponseWriter: w}
	var up atomic.Int64
	r.Body = &countingBody{ReadCloser: r.Body, n: &up}
	p.ModelRoute.ServeHTTP(cw, r)
	// Refused: the route's own 401 and 403 (a token), not the provider's answers.
	rec.Err = cw.Header().Get("X-Hiloop-Error")
	rec.Allowed = !(rec.Err != "" && (cw.status == http.StatusUnauthorized || cw.status == http.StatusForbidden))
	switch {
	case rec.Err != "":
	case cw.status == 0:
		rec.Err = "ended before an answer (the client went away)"
	case cw.status >= 400:
		rec.Err = fmt.Sprintf("upstream answered %d %s", cw.status, http.StatusText(cw.status))
	}
	rec.BytesUp, rec.BytesDown = up.Load(), cw.n
}

// captured serves one origin-form request read from a captured connection (or a CONNECT
// tunnel): it goes to the host its Host names at the connection's destination port, decided as
// an explicit proxy request would be.
func (p *Proxy) captured(w http.ResponseWriter, r *http.Request, ec *explicitConn, rec *Record) {
	host := ec.fallback
	if r.Host != "" {
		h := r.Host
		if hp, _, err := net.SplitHostPort(h); err == nil {
			h = hp
		}
		if host = normalHost(h); host == "" {
			rec.Port = ec.port
			rec.Err = fmt.Sprintf("malformed request: Host %q is not a host name", r.Host)
			plainError(w, http.StatusBadRequest, rec.Err)
			return
		}
	}
	rec.Host, rec.Port = host, ec.port
	switch {
	case r.Method == http.MethodConnect:
		rec.Err = "CONNECT on a captured connection"
		plainError(w, http.StatusBadRequest, fmt.Sprintf("CONNECT is for the egress proxy (%s), not for a connection to %s", ProxyURL, host))
		return
	case ec.pin != "" && !p.sameHost(ec.pin, host):
		rec.Rule = fmt.Sprintf("CONNECT to %s carried a request for %s", ec.pin, host)
		w.Header().Set("Connection", "close")
		plainError(w, http.StatusForbidden, rec.Rule)
		return
	}
	r.URL.Scheme = "http"
	r.URL.Host = net.JoinHostPort(host, strconv.Itoa(int(ec.port)))
	p.forward(w, r, rec)
	if a, err := netip.ParseAddr(host); err == nil && r.Host == "" {
		// Only the address is known, and the refused name it stands for if it does.
		rec.Host, _ = p.Refused.Host(a)
	}
}

// sameHost reports whether name (an SNI or Host, normalised) is the host a tunnel was opened
// to: the same name, or the routed host behind the synthetic address it was opened to.
func (p *Proxy) sameHost(tunnel, name string) bool {
	if tunnel == name {
		return true
	}
	if a, err := netip.ParseAddr(tunnel); err == nil {
		if n, ok := p.syntheticHost(a.Unmap()); ok {
			return normalHost(n) == name
		}
	}
	return false
}

// refuseRequest answers a request that could not be carried with the text of refusal: a 403
// for a refusal, a 502 or 504 for an upstream that failed. A refusal on a captured connection
// also closes it (Connection: close), as the transparent path's own answers do: the client
// connected to one host, which is refused, and one that pipelines (apt) should not send the
// rest of its requests after it.
func (p *Proxy) refuseRequest(w http.ResponseWriter, r *http.Request, err error, rec *Record) {
	status, msg := p.refusal(err, rec)
	if ec, _ := r.Context().Value(explicitKey{}).(*explicitConn); ec != nil && ec.captured && !rec.Allowed {
		w.Header().Set("Connection", "close")
	}
	plainError(w, status, msg)
}

func plainError(w http.ResponseWriter, status int, msg string) {
	http.Error(w, "hiloop gateway: "+msg, status)
}

// connect serves CONNECT host:port: a tunnel, byte for byte.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, ec *explicitConn, rec *Record) {
	host, port, err := splitTarget(r.Host, 0)
	if err != nil {
		rec.Err = err.Error()
		plainError(w, http.StatusBadRequest, err.Error())
		return
	}
	rec.Host, rec.Port = host, port
	ctx, cancel := context.WithTimeout(r.Context(), p.dialTimeout())
	up, err := p.dial(ctx, host, port)
	cancel()
	rec.Addr, rec.Rule = up.addr, up.route
	if err != nil {
		status, msg := p.refusal(err, rec)
		plainError(w, status, msg)
		return
	}
	defer up.conn.Close()
	rec.Allowed = true
	_, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rec.Err = "hijack: " + err.Error()
		plainError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// The tunnel runs on the accepted connection itself (a TCP-to-TCP splice); the explicit
	// connection is closed when it ends, which tells ServeConn the connection is done.
	defer ec.Close()
	c := ec.Conn
	c.SetWriteDeadline(time.Now().Add(p.headerTimeout()))
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		rec.Err = "answering CONNECT: " + err.Error()
		return
	}
	// Bytes the client sent after the request head (an eager ClientHello) were read by the
	// server's buffer: they go first.
	var b []byte
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ = brw.Reader.Peek(n)
	}
	// What the tunnel carries is checked too: a ClientHello's SNI or a request's Host that
	// names another host (a shared CDN's other customer) is refused.
	h, err := sniff(&prefixConn{Conn: c, prefix: b}, p.firstTimeout(), p.headerTimeout())
	if err != nil {
		rec.Err = err.Error()
		reset(c)
		return
	}
	if h.host != "" && !p.sameHost(host, h.host) {
		rec.Allowed = false
		rec.Rule = fmt.Sprintf("CONNECT to %s carried a request for %s", host, h.host)
		if h.kind == KindTLS {
			p.sendAlert(c, h.head)
			return
		}
		reset(c)
		return
	}
	if h.ech {
		if err := p.HostPolicy().CheckECH(host, port); err != nil {
			p.refusal(err, rec)
			p.sendAlert(c, h.head)
			return
		}
	}
	switch {
	case h.kind == KindTLS && p.bound(host):
		// Secrets (terminate.go): TLS to a host with a secret bound to it is terminated.
		p.connectTerminate(c, h.head, host, port, up.conn, rec)
		return
	case h.kind == KindHTTP:
		// Plain HTTP in the tunnel: every request is read, and must name the CONNECT host.
		up.conn.Close()
		inner := Record{Sandbox: p.Sandbox, Time: rec.Time}
		ec := &explicitConn{Conn: &prefixConn{Conn: c, prefix: h.head}, closed: make(chan struct{}),
			captured: true, port: port, fallback: host, pin: host}
		if p.serveHTTPConn(ec, &inner, KindHTTP) {
			rec.Err = inner.Err
		}
		return
	}
	b = h.head
	if len(b) > 0 {
		up.conn.SetWriteDeadline(time.Now().Add(p.idleTimeout()))
		k, err := up.conn.Write(b)
		rec.BytesUp += int64(k)
		if err != nil {
			rec.Err = "upstream: " + err.Error()
			return
		}
	}
	bu, bd, err := p.splice(c, up.conn)
	rec.BytesUp += bu
	rec.BytesDown = bd
	if err != nil {
		rec.Err = err.Error()
	}
}

// splitTarget splits a CONNECT target or URL host into a normal host and a port (def when
// none is given and def is not 0).
func splitTarget(hostport string, def uint16) (string, uint16, error) {
	h, ps, err := net.SplitHostPort(hostport)
	if err != nil && def != 0 {
		h, ps, err = hostport, strconv.Itoa(int(def)), nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", hostport)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	host := normalHost(h)
	if err != nil || port == 0 || host == "" {
		return "", 0, fmt.Errorf("%q is not host:port with a port from 1 to 65535", hostport)
	}
	return host, uint16(port), nil
}

type forwardKey struct{}

// forwarding is what forward tells forwardError through the request's context.
type forwarding struct {
	rec     *Record
	refused error // a pooled connection the policy now refuses, closed before it was used
}

// forward serves an absolute-form request: it goes to its host over a pooled connection, so
// one client connection can carry requests to many hosts.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, rec *Record) {
	if r.URL.Scheme != "http" {
		rec.Err = "scheme " + r.URL.Scheme
		plainError(w, http.StatusBadRequest, fmt.Sprintf("only http:// URLs are forwarded, not %s://; https goes through CONNECT", r.URL.Scheme))
		return
	}
	host, port, err := splitTarget(r.URL.Host, 80)
	if err != nil {
		rec.Err = err.Error()
		plainError(w, http.StatusBadRequest, err.Error())
		return
	}
	rec.Host, rec.Port = host, port
	// The transport pools and routes by URL host: the normal form, so that every spelling of a
	// host (case, a trailing dot) goes where the decision below named.
	r.URL.Host = net.JoinHostPort(host, strconv.Itoa(int(port)))
	// Decided here and not only when the transport dials: a request may reuse a pooled
	// connection that an earlier policy let through.
	if err := p.decide(p.HostPolicy(), host, port); err != nil {
		p.refuseRequest(w, r, err, rec)
		return
	}
	rec.Allowed = true
	rec.SecretMisuse = p.plainMisuse(host, r) // Secrets (terminate.go): never injected in clear
	routed := false
	for _, rt := range p.Routes {
		if rt.Host == host && rt.Port == port {
			rec.Rule = fmt.Sprintf("route %s:%d=%s", rt.Host, rt.Port, rt.To)
			routed = true
		}
	}
	fw := &forwarding{rec: rec}
	ctx := context.WithValue(r.Context(), forwardKey{}, fw)
	var mu sync.Mutex
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			mu.Lock()
			defer mu.Unlock()
			if ic, ok := info.Conn.(*idleConn); ok {
				rec.Addr = ic.addr
			} else {
				rec.Addr = addrPortOf(info.Conn.RemoteAddr())
			}
			// A pooled connection was dialled under the policy of its time: its address is
			// checked against today's deny rules. Closed before the request is written, it
			// fails the request, which the transport retries on a new dial (decided anew)
			// when it can, else forwardError answers the refusal.
			if info.Reused && !routed {
				if err := p.HostPolicy().CheckAddr(host, rec.Addr.Addr(), port); err != nil {
					fw.refused = err
					info.Conn.Close()
				}
			}
		},
	})
	r = r.WithContext(ctx)
	var up atomic.Int64
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, n: &up}
	}
	cw := &countingWriter{ResponseWriter: w}
	defer func() { // also when the response breaks off (a panic)
		mu.Lock()
		rec.BytesUp = up.Load()
		if rec.Allowed && rec.Err == "" { // else what went down was the gateway's own answer
			rec.BytesDown = cw.n
		}
		mu.Unlock()
	}()
	p.forwarder.ServeHTTP(cw, r)
}

// forwardRewrite makes the upstream request from a client's absolute-form request: the
// hop-by-hop headers are gone (httputil does that), and so is every Proxy-* header; the rest,
// forwarding headers and query included, goes as the client sent it.
func forwardRewrite(pr *httputil.ProxyRequest) {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v, ok := pr.In.Header[h]; ok {
			pr.Out.Header[h] = v
		}
	}
	for h := range pr.Out.Header {
		if strings.HasPrefix(h, "Proxy-") {
			delete(pr.Out.Header, h)
		}
	}
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
}

// dialForward is the forwarding transport's dialer: the same routes and policy as a tunnel.
func (p *Proxy) dialForward(ctx context.Context, network, addr string) (c net.Conn, err error) {
	defer func() {
		// The transport dials in a goroutine of its own: a panic here would end the daemon.
		if v := recover(); v != nil {
			err = fmt.Errorf("internal error: %v", v)
			p.logPanic(v)
		}
	}()
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.forwardCtx(ctx)
	defer cancel()
	up, err := p.dial(ctx, host, uint16(port))
	if err != nil {
		return nil, &forwardDialError{err: err, addr: up.addr}
	}
	ic, err := p.track(up.conn)
	if err != nil {
		return nil, err
	}
	ic.addr = up.addr
	return ic, nil
}

// forwardDialError carries the address a forwarded request was refused or failed at back to
// the handler through the transport.
type forwardDialError struct {
	err  error
	addr netip.AddrPort
}

func (e *forwardDialError) Error() string { return e.err.Error() }
func (e *forwardDialError) Unwrap() error { return e.err }

func (p *Proxy) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	fw, _ := r.Context().Value(forwardKey{}).(*forwarding)
	if fw == nil {
		fw = &forwarding{rec: &Record{}}
	}
	rec := fw.rec
	var fe *forwardDialError
	switch {
	case errors.As(err, &fe):
		rec.Addr = fe.addr
		p.refuseRequest(w, r, fe.err, rec)
		return
	case fw.refused != nil:
		p.refuseRequest(w, r, fw.refused, rec)
		return
	}
	rec.Err = err.Error()
	switch {
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads an answer.
	case isTimeout(err):
		plainError(w, http.StatusGatewayTimeout, "upstream: "+err.Error())
	default:
		plainError(w, http.StatusBadGateway, "upstream: "+err.Error())
	}
}

// idleConn is an upstream connection of the forwarding transport: one that neither sends nor
// receives for idle fails, so a stalled upstream cannot hold a request forever.
type idleConn struct {
	net.Conn
	idle time.Duration
	p    *Proxy         // whose upConns hold it
	addr netip.AddrPort // the address dialled
}

func (c *idleConn) Close() error {
	c.p.mu.Lock()
	delete(c.p.upConns, c)
	c.p.mu.Unlock()
	return c.Conn.Close()
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(b)
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// countingWriter counts the response body bytes and keeps the status; Unwrap lets
// http.ResponseController reach the server's writer (to flush and to hijack for an upgrade).
type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
