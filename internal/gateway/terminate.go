package gateway

// Termination: a TLS connection to a host with a secret bound to it (Proxy.Secrets) is not
// tunnelled. The gateway completes the handshake with the sandbox's client using a leaf the
// daemon's CA mints for the host, reads the requests (HTTP/1.1 or HTTP/2, by ALPN), puts the
// secret in where it is bound (applySecrets) and sends each request on to the real host over a
// TLS connection of its own, verified as any client would verify it. Each answer is scrubbed of
// the values of the secrets bound to the host before the client reads it (scrub.go).
//
// Only TLS is terminated: a plain-HTTP request to a bound host (port 80, or any request the
// gateway reads in clear) never gets the secret, because the value would then cross the
// network in clear text; its placeholder is sent as it is and audited as misuse.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// upstreamSessions lets re-originated connections resume TLS sessions: a terminated client
// that opens many connections costs the real host one full handshake, not one each.
var upstreamSessions = tls.NewLRUClientSessionCache(256)

// copyBuffers are the response bodies' copy buffers: larger than httputil's 32 KiB, so a big
// download costs fewer writes, each a few full TLS records.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any { return new([128 << 10]byte) }}}

type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte  { return b.pool.Get().(*[128 << 10]byte)[:] }
func (b *bufferPool) Put(p []byte) { b.pool.Put((*[128 << 10]byte)(p)) }

// What one terminated HTTP/2 connection may make the gateway hold, from either side. net/http
// reads a frame whole into a buffer it keeps for the connection's life, and by default lets a
// peer send frames of 1 MiB: an idle connection would keep 1 MiB a side after one large frame.
// Its transport also lets an upstream send 1 GiB on a connection (4 MiB a stream) that the
// sandbox's client has not read yet. 64 KiB frames are four TLS records; 4 MiB a connection is
// what one stream had.
var (
	clientH2   = &http.HTTP2Config{MaxReadFrameSize: maxH2Frame}
	upstreamH2 = &http.HTTP2Config{MaxReadFrameSize: maxH2Frame, MaxReceiveBufferPerConnection: maxH2Window}
)

const (
	maxH2Frame  = 64 << 10
	maxH2Window = 4 << 20
)

// upstreamTLS is how the gateway speaks TLS to the real host name: verified against the host's
// trust store, or against UpstreamCAs (sandboxd --gateway-upstream-ca) as well.
func (p *Proxy) upstreamTLS(name string) *tls.Config {
	cfg := &tls.Config{
		ServerName:         name,
		NextProtos:         []string{"h2", "http/1.1"},
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: upstreamSessions,
	}
	if extra := p.UpstreamCAs; extra != nil {
		// crypto/tls verifies against one pool, and the system pool cannot be merged with
		// another: verify by hand, the same way, against either.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the server sent no certificate")
			}
			opts := x509.VerifyOptions{DNSName: name, Intermediates: x509.NewCertPool(), Roots: extra}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err == nil {
				return nil
			}
			opts.Roots = nil // the host's trust store
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("tls: failed to verify certificate: %w", err)
			}
			return nil
		}
	}
	return cfg
}

// terminated is one client connection the gateway terminated.
type terminated struct {
	p         *Proxy
	name      string // the host, as bound and as verified upstream
	port      uint16
	authority string // name:port, the upstream URL's host
	forwarder *httputil.ReverseProxy

	seedMu sync.Mutex
	seed   net.Conn // the connection dialled when the client arrived, for the first request

	requests atomic.Int64
	handlers sync.WaitGroup // requests being served: the record is made once they are done
	mu       sync.Mutex
	secrets  []string // labels of the secrets injected, in order
	scrubbed []string // labels of the secrets whose values were scrubbed from answers, in order
	misuse   bool
	err      string // the first request's failure
}

// serveTerminated terminates the client's TLS connection c to name:port (head: what was read
// from c already, the ClientHello at least) and carries its requests, the first over up, an
// upstream connection dialled for it. It fills rec for the whole connection: bytes each way as
// the client sent and received them, the secrets injected, misuse, the first failure.
func (p *Proxy) serveTerminated(c net.Conn, head []byte, name string, port uint16, up net.Conn, rec *Record) {
	rec.Terminated = true
	cc := &clientConn{Conn: c, prefix: head, idle: p.idleTimeout(), closed: make(chan struct{})}
	defer func() {
		rec.BytesUp += cc.read.Load()
		rec.BytesDown += cc.written.Load()
	}()
	tc := tls.Server(cc, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.CA.Leaf(name) },
		NextProtos:     []string{"h2", "http/1.1"},
		MinVersion:     tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(p.ctx, p.headerTimeout())
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		// Most often a client that does not trust the daemon's CA.
		rec.Err = "TLS with the sandbox's client: " + err.Error()
		cc.Close()
		return
	}

	t := &terminated{p: p, name: name, port: port, seed: up, authority: net.JoinHostPort(name, strconv.Itoa(int(port)))}
	tr := &http.Transport{
		DialTLSContext:         t.dialTLS,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		MaxResponseHeaderBytes: maxHead,
		ResponseHeaderTimeout:  p.idleTimeout(),
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true, // the client's Accept-Encoding goes upstream as it is
		HTTP2:                  upstreamH2,
	}
	defer tr.CloseIdleConnections()
	t.forwarder = &httputil.ReverseProxy{
		Rewrite:       t.rewrite,
		Transport:     scrubTransport{tr},
		FlushInterval: -1, // streamed responses (server-sent events, long polls) flow as they come
		ErrorHandler:  t.failed,
		ErrorLog:      log.New(io.Discard, "", 0),
		BufferPool:    copyBuffers,
	}
	srv := &http.Server{
		Handler:           t,
		ReadHeaderTimeout: p.headerTimeout(),
		IdleTimeout:       p.idleTimeout(),
		MaxHeaderBytes:    maxHead,
		ErrorLog:          log.New(io.Discard, "", 0),
		BaseContext:       func(net.Listener) context.Context { return p.ctx },
		HTTP2:             clientH2,
	}
	// net/http serves a *tls.Conn it accepts by the protocol ALPN chose, HTTP/2 included.
	l := &oneConnListener{c: tc}
	srv.Serve(l)
	if l.took {
		<-cc.closed
	}
	// A client may close as soon as it has its response, before the handler that wrote it has
	// noted the secrets it injected.
	t.handlers.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.secrets) > 0 {
		rec.Secret = strings.Join(t.secrets, ",")
	}
	if len(t.scrubbed) > 0 {
		rec.Scrubbed = strings.Join(t.scrubbed, ",")
	}
	rec.SecretMisuse = t.misuse
	switch {
	case !l.took:
		rec.Err = "the gateway is closed"
	case t.err != "":
		rec.Err = t.err
	case t.requests.Load() == 0:
		rec.Err = "no request after the TLS handshake"
	}
}

// ServeHTTP carries one request of the terminated connection to the real host.
func (t *terminated) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t.requests.Add(1)
	t.handlers.Add(1)
	defer t.handlers.Done()
	if r.Method == http.MethodTrace || r.Method == "TRACK" {
		// The upstream would echo the request back, the injected secret with it.
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		plainError(w, http.StatusMethodNotAllowed, r.Method+" is refused on a connection a secret is injected into")
		return
	}
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler { // httputil's way of saying a response broke off
				t.fail(fmt.Sprintf("internal error: %v", v))
				t.p.logPanic(v)
			} else {
				t.fail("the response broke off")
			}
			panic(http.ErrAbortHandler) // the server ends the request quietly
		}
	}()
	// The bindings are asked for on every request: a secret detached or rotated a moment ago
	// is already gone or new here.
	bindings := t.p.secretsFor(t.name)
	values := secretValues(bindings, t.name)
	use := applySecrets(bindings, values, t.name, r)
	// The answer is scrubbed of every value bound to the host, not only those this request
	// carried: a host may hand back a value it got in an earlier request.
	scrub := newScrubber(bindings, values)
	var bodyMisuse, sent atomic.Bool
	r.Body = watchBody(r.Body, placeholders(bindings), &bodyMisuse)
	// A secret counts as injected once the headers carrying it went to the verified host, not
	// when the host could not be reached.
	// An answer proves the headers went too: over HTTP/2 the writer may note WroteHeaders only
	// after the response is back and the handler has returned.
	r = r.WithContext(withScrubber(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		WroteHeaders:         func() { sent.Store(true) },
		GotFirstResponseByte: func() { sent.Store(true) },
	}), scrub))
	// Noted also when the answer breaks off (the client went away mid-body): the value went,
	// and the part of the answer read may have been scrubbed.
	defer func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, s := range use.injected {
			if sent.Load() && !slices.Contains(t.secrets, s) {
				t.secrets = append(t.secrets, s)
			}
		}
		if scrub != nil {
			for _, s := range scrub.scrubbed() {
				if !slices.Contains(t.scrubbed, s) {
					t.scrubbed = append(t.scrubbed, s)
				}
			}
		}
		t.misuse = t.misuse || use.misuse || bodyMisuse.Load()
	}()
	t.forwarder.ServeHTTP(w, r)
}

// rewrite makes the upstream request: the client's, to the real host over TLS. When its
// answer is to be scrubbed, the host is asked for one the gateway can scrub whole: in an
// encoding it can read, and not a range of it (a value cut by a range's edge would reach the
// client in halves, neither of which is the value).
func (t *terminated) rewrite(pr *httputil.ProxyRequest) {
	forwardRewrite(pr)
	pr.Out.URL.Scheme = "https"
	pr.Out.URL.Host = t.authority
	pr.Out.Host = pr.In.Host
	if scrubberOf(pr.In.Context()) != nil {
		pr.Out.Header.Set("Accept-Encoding", scrubAcceptEncoding(pr.In.Header.Values("Accept-Encoding")))
		pr.Out.Header.Del("Range")
		pr.Out.Header.Del("If-Range")
	}
}

func (t *terminated) fail(msg string) {
	t.mu.Lock()
	if t.err == "" {
		t.err = msg
	}
	t.mu.Unlock()
}

// failed answers a request the gateway could not carry: 403 for a refused address, 502 when
// the real host could not be reached or not verified.
func (t *terminated) failed(w http.ResponseWriter, r *http.Request, err error) {
	var fe *forwardDialError
	if errors.As(err, &fe) {
		var rec Record
		status, msg := t.p.refusal(fe.err, &rec)
		if rec.Rule != "" {
			t.fail("denied: " + rec.Rule)
		} else {
			t.fail(rec.Err)
		}
		plainError(w, status, msg)
		return
	}
	var refused *unscrubbable
	if errors.As(err, &refused) {
		t.fail(refused.Error())
		plainError(w, http.StatusBadGateway, refused.Error())
		return
	}
	// An error may quote what the host sent (a malformed status line): scrubbed as its answer.
	msg := "upstream: " + err.Error()
	if s := scrubberOf(r.Context()); s != nil {
		msg, _ = s.text(msg)
	}
	t.fail(msg)
	switch {
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads an answer.
	case isTimeout(err):
		plainError(w, http.StatusGatewayTimeout, msg)
	default:
		plainError(w, http.StatusBadGateway, msg)
	}
}

// dialTLS connects to the real host for the transport: over the connection dialled when the
// client arrived if it is still unused, else through the same routes and policy as a tunnel.
func (t *terminated) dialTLS(ctx context.Context, _, _ string) (conn net.Conn, err error) {
	defer func() {
		// The transport dials in a goroutine of its own: a panic here would end the daemon.
		if v := recover(); v != nil {
			err = fmt.Errorf("internal error: %v", v)
			t.p.logPanic(v)
		}
	}()
	t.seedMu.Lock()
	raw := t.seed
	t.seed = nil
	t.seedMu.Unlock()
	ctx, cancel := t.p.forwardCtx(ctx)
	defer cancel()
	if raw == nil {
		up, err := t.p.dial(ctx, t.name, t.port)
		if err != nil {
			return nil, &forwardDialError{err: err, addr: up.addr}
		}
		// The client's connection paid for one upstream connection, the seed. Another (an
		// HTTP/2 client's parallel requests to an HTTP/1.1 host) takes a place of its own.
		if raw, err = t.p.share.extra(up.conn, t.fail); err != nil {
			return nil, &forwardDialError{err: err, addr: up.addr}
		}
	}
	ic, err := t.p.track(raw)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(ic, t.p.upstreamTLS(t.name))
	if err := tc.HandshakeContext(ctx); err != nil {
		ic.Close()
		return nil, err
	}
	return tc, nil
}

// clientConn is the sandbox's side of a terminated connection, under the TLS server: it first
// replays what was read while deciding, counts bytes, fails a write the client takes nothing of
// for idle, and tells serveTerminated when the server is done with it.
type clientConn struct {
	net.Conn
	prefix    []byte
	idle      time.Duration
	read      atomic.Int64
	written   atomic.Int64
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *clientConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		c.read.Add(int64(n))
		return n, nil
	}
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *clientConn) Write(b []byte) (int, error) {
	// The servers set no write deadline of their own (no WriteTimeout): a stream may last.
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

func (c *clientConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		err = c.Conn.Close()
		close(c.closed)
	})
	return err
}

// prefixConn replays bytes read from a connection already before reading more of it.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// connectTerminate is the CONNECT tunnel's side of termination, for a host with a secret bound
// to it whose client started TLS for it (no SNI, or the same name: connect refuses another):
// the connection is terminated. head is every byte read from c so far.
func (p *Proxy) connectTerminate(c net.Conn, head []byte, host string, port uint16, up net.Conn, rec *Record) {
	p.serveTerminated(c, head, host, port, up, rec)
}

func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// plainMisuse reports whether a request the gateway carries in clear to host holds a
// placeholder: it is sent as it is (no secret crosses the network in clear text) and audited.
func (p *Proxy) plainMisuse(host string, r *http.Request) bool {
	bindings := p.secretsFor(host)
	return applySecrets(bindings, secretValues(bindings, ""), "", r).misuse
}
