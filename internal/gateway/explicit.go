package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

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
