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
	"net/http/httputil"
	"net/netip"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
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
// gateway's listener (transparent.go) and those made to the same listener as an explicit HTTP
// proxy (explicit.go); this file holds what both share. Set the fields before the first Serve
// or ServeConn and leave them alone after.
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
		// The sandbox's owner types its bare name, not the daemon's key of it.
		_, name := identity.Split(p.Sandbox)
		return http.StatusForbidden, fmt.Sprintf("%s (the sandbox's egress policy: `hiloop sandbox egress %s` shows and changes it)", hd.Error(), name)
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

// alertAccessDenied is TLS's access_denied alert (RFC 8446 section 6.2: access control was
// applied and the sender decided not to proceed), the one a refused ClientHello gets. Clients
// print it as what it is: OpenSSL's (curl, Node, Python, apt) "tlsv1 alert access denied", Go's
// "remote error: tls: access denied". handshake_failure (40), the other candidate, reads as a
// cipher or version mismatch and sends people looking for one.
const alertAccessDenied = 49

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
