package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/testenv"
)

// upstreams are the servers the tests' routes point pretend hosts at, all on loopback.
type upstreams struct {
	caPool *x509.CertPool
	caPEM  []byte
	api    *httptest.Server // TLS, certificate for *.example.test
	web    *httptest.Server // plain HTTP
	other  *httptest.Server // plain HTTP, a second host
	echo   net.Listener     // echoes, then half-closes when the client has
	sum    net.Listener     // reads to EOF, answers the SHA-256 of what it read
	banner net.Listener     // speaks first, then echoes
	closed netip.AddrPort   // nothing listens here
}

// newCA makes a CA and a leaf certificate for *.example.test signed by it.
func newCA(t *testing.T) (*x509.CertPool, []byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "api.example.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"api.example.test", "*.example.test"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
}

// hello answers with what it saw: the host, the SNI, the path and the headers.
func helloHandler(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sum": // the SHA-256 of the body
			h := sha256.New()
			io.Copy(h, r.Body)
			fmt.Fprintf(w, "%x", h.Sum(nil))
			return
		case "/bytes": // n pseudo-random bytes from seed
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			seed, _ := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 64)
			io.CopyN(w, seeded(seed), int64(n))
			return
		}
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		fmt.Fprintf(w, "%s host=%s sni=%s path=%s\n", name, r.Host, sni, r.URL.RequestURI())
		r.Header.Write(w)
	}
}

func seeded(seed uint64) io.Reader { return mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}) }

func newUpstreams(t *testing.T) *upstreams {
	t.Helper()
	u := &upstreams{}
	var leaf tls.Certificate
	u.caPool, u.caPEM, leaf = newCA(t)
	u.api = httptest.NewUnstartedServer(helloHandler("api"))
	u.api.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	u.api.StartTLS()
	t.Cleanup(u.api.Close)
	u.web = httptest.NewServer(helloHandler("web"))
	t.Cleanup(u.web.Close)
	u.other = httptest.NewServer(helloHandler("other"))
	t.Cleanup(u.other.Close)
	u.echo = tcpServer(t, func(c net.Conn) {
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	})
	u.sum = tcpServer(t, func(c net.Conn) {
		h := sha256.New()
		io.Copy(h, c)
		fmt.Fprintf(c, "%x", h.Sum(nil))
	})
	u.banner = tcpServer(t, func(c net.Conn) {
		io.WriteString(c, "220 banner.example.test ESMTP\r\n")
		io.Copy(c, c)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.closed = addrPortOf(ln.Addr())
	ln.Close()
	return u
}

func tcpServer(t *testing.T, serve func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln
}

func serverAddr(s *httptest.Server) netip.AddrPort { return addrPortOf(s.Listener.Addr()) }

// The pretend world: synthetic addresses for routed hosts, and what other names resolve to.
var (
	synthetic = map[netip.Addr]string{
		netip.MustParseAddr("198.18.0.1"): "api.example.test",
		netip.MustParseAddr("198.18.0.2"): "web.example.test",
		netip.MustParseAddr("198.18.0.3"): "echo.example.test",
		netip.MustParseAddr("198.18.0.4"): "banner.example.test",
		netip.MustParseAddr("198.18.0.5"): "sum.example.test",
	}
	resolves = map[string][]netip.Addr{
		"evil.example.test":  {netip.MustParseAddr("10.0.0.1")},
		"meta.example.test":  {netip.MustParseAddr("169.254.169.254")},
		"loop.example.test":  {netip.MustParseAddr("127.0.0.1")},
		"mixed.example.test": {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:127.0.0.1")},
	}
	public = netip.MustParseAddr("93.184.216.34") // a pretend original destination, never dialled
)

// harness is a Proxy on 127.0.0.1:0 whose fake OriginalDst maps a client's source address
// (each transparent client gets its own 127.x.y.z) to the destination it pretends to dial.
type harness struct {
	t    *testing.T
	u    *upstreams
	p    *Proxy
	addr string
	url  *url.URL

	mu      sync.Mutex
	dsts    map[netip.Addr]netip.AddrPort
	panics  map[netip.Addr]bool
	records []Record
	notify  chan struct{}
	accepts atomic.Int64
}

var nextClientIP atomic.Uint32

func newHarness(t *testing.T, configure func(*Proxy)) *harness {
	t.Helper()
	h := &harness{t: t, u: newUpstreams(t), dsts: map[netip.Addr]netip.AddrPort{}, panics: map[netip.Addr]bool{}, notify: make(chan struct{}, 1)}
	h.p = &Proxy{
		Sandbox: "sb1",
		Routes: []Route{
			{Host: "api.example.test", Port: 443, To: serverAddr(h.u.api)},
			{Host: "web.example.test", Port: 80, To: serverAddr(h.u.web)},
			{Host: "other.example.test", Port: 80, To: serverAddr(h.u.other)},
			{Host: "echo.example.test", Port: 7, To: addrPortOf(h.u.echo.Addr())},
			{Host: "banner.example.test", Port: 25, To: addrPortOf(h.u.banner.Addr())},
			{Host: "sum.example.test", Port: 9, To: addrPortOf(h.u.sum.Addr())},
			{Host: "refused.example.test", Port: 80, To: h.u.closed},
		},
		SyntheticHost: func(a netip.Addr) (string, bool) { s, ok := synthetic[a]; return s, ok },
		OriginalDst:   h.originalDst,
		Policy:        &AddrPolicy{Local: noLocal},
		Lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			if a, ok := resolves[host]; ok {
				return a, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		},
		Audit: h.audit,
	}
	if configure != nil {
		configure(h.p)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	h.url = &url.URL{Scheme: "http", Host: h.addr}
	served := make(chan error, 1)
	go func() { served <- h.p.Serve(countingListener{ln, &h.accepts}) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-served; err != nil && !errors.Is(err, ErrProxyClosed) {
			t.Errorf("Serve after its listener closed: %v", err)
		}
		h.p.Close()
	})
	return h
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func (h *harness) originalDst(c net.Conn) (netip.AddrPort, error) {
	src := addrPortOf(c.RemoteAddr()).Addr()
	h.mu.Lock()
	dst, ok := h.dsts[src]
	boom := h.panics[src]
	h.mu.Unlock()
	if boom {
		panic("original destination exploded")
	}
	if !ok {
		return addrPortOf(c.LocalAddr()), nil // the explicit proxy
	}
	return dst, nil
}

func (h *harness) audit(r Record) {
	h.mu.Lock()
	h.records = append(h.records, r)
	h.mu.Unlock()
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

// record waits for an audit record that match accepts and takes it.
func (h *harness) record(what string, match func(Record) bool) Record {
	h.t.Helper()
	deadline := testenv.Deadline(h.t)
	for {
		h.mu.Lock()
		for i, r := range h.records {
			if match(r) {
				h.records = append(h.records[:i], h.records[i+1:]...)
				h.mu.Unlock()
				return r
			}
		}
		seen := fmt.Sprintf("%+v", h.records)
		h.mu.Unlock()
		select {
		case <-h.notify:
		case <-deadline:
			h.t.Fatalf("no audit record for %s; have %s", what, seen)
		}
	}
}

func byHost(kind, host string) func(Record) bool {
	return func(r Record) bool { return r.Kind == kind && r.Host == host }
}

// dialTransparent connects to the proxy as if the capture had redirected a connection to dst.
func (h *harness) dialTransparent(dst netip.AddrPort) net.Conn {
	h.t.Helper()
	c, err := h.transparentDialer(dst)(context.Background(), "tcp", "")
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func (h *harness) transparentDialer(dst netip.AddrPort) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		src := h.clientIP()
		h.mu.Lock()
		h.dsts[src] = dst
		h.mu.Unlock()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
		return d.DialContext(ctx, "tcp", h.addr)
	}
}

func (h *harness) clientIP() netip.Addr {
	n := nextClientIP.Add(1)
	return netip.AddrFrom4([4]byte{127, byte(1 + n/250/250), byte(n / 250 % 250), byte(1 + n%250)})
}

func (h *harness) dialExplicit() net.Conn {
	h.t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// transparentClient is an HTTP client whose every connection is captured as if bound for dst.
func (h *harness) transparentClient(dst netip.AddrPort, tlsConf *tls.Config) *http.Client {
	tr := &http.Transport{DialContext: h.transparentDialer(dst), TLSClientConfig: tlsConf, DisableKeepAlives: true}
	return &http.Client{Transport: tr}
}

func (h *harness) explicitClient() *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(h.url), TLSClientConfig: &tls.Config{RootCAs: h.u.caPool}}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func wantBody(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Fatalf("body %q does not contain %q", body, w)
		}
	}
}

func TestTransparentTLSBySNI(t *testing.T) {
	h := newHarness(t, nil)
	c := h.transparentClient(netip.AddrPortFrom(public, 443), &tls.Config{RootCAs: h.u.caPool})
	status, body := get(t, c, "https://api.example.test/path?q=1")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	wantBody(t, body, "api host=api.example.test sni=api.example.test path=/path?q=1")
	r := h.record("the TLS connection", byHost(KindTLS, "api.example.test"))
	if !r.Allowed || r.Port != 443 || r.Addr != serverAddr(h.u.api) || !strings.HasPrefix(r.Rule, "route api.example.test:443=") ||
		r.BytesUp < 200 || r.BytesDown < 500 || r.Err != "" || r.Sandbox != "sb1" || r.Duration <= 0 {
		t.Fatalf("record %+v", r)
	}
}

// A ClientHello without SNI to a synthetic address goes to the routed host behind it.
func TestTransparentTLSBySyntheticAddress(t *testing.T) {
	h := newHarness(t, nil)
	c := h.dialTransparent(netip.MustParseAddrPort("198.18.0.1:443"))
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // no ServerName: no SNI
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if cn := tc.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "api.example.test" {
		t.Fatalf("reached %q", cn)
	}
	tc.Close()
	r := h.record("the TLS connection", byHost(KindTLS, "api.example.test"))
	if !r.Allowed || r.Addr != serverAddr(h.u.api) {
		t.Fatalf("record %+v", r)
	}
}

func TestTransparentHTTPByHost(t *testing.T) {
	h := newHarness(t, nil)
	c := h.transparentClient(netip.AddrPortFrom(public, 80), nil)
	status, body := get(t, c, "http://web.example.test/a/b")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	wantBody(t, body, "web host=web.example.test sni= path=/a/b")
	r := h.record("the HTTP connection", byHost(KindHTTP, "web.example.test"))
	if !r.Allowed || r.Port != 80 || r.Addr != serverAddr(h.u.web) || r.BytesDown == 0 {
		t.Fatalf("record %+v", r)
	}
}

func TestExplicitConnect(t *testing.T) {
	h := newHarness(t, nil)
	c := h.explicitClient()
	status, body := get(t, c, "https://api.example.test/x")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	wantBody(t, body, "api host=api.example.test sni=api.example.test path=/x")
	c.CloseIdleConnections() // the tunnel ends, and its record comes
	r := h.record("the CONNECT tunnel", func(r Record) bool { return r.Kind == KindConnect })
	if r.Host != "api.example.test" || r.Port != 443 || !r.Allowed || r.Addr != serverAddr(h.u.api) || r.BytesUp == 0 || r.BytesDown == 0 {
		t.Fatalf("record %+v", r)
	}
}

// Absolute-form requests to different hosts share one client connection; hop-by-hop and
// Proxy-* headers stay behind, the rest goes as sent.
func TestExplicitForward(t *testing.T) {
	h := newHarness(t, nil)
	c := h.explicitClient()
	for _, host := range []string{"web", "other", "web"} {
		req, _ := http.NewRequest("GET", "http://"+host+".example.test/p?a=1;b=2", nil)
		req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
		req.Header.Set("Proxy-Whatever", "1")
		req.Header.Set("Connection", "keep-alive, X-Hop")
		req.Header.Set("X-Hop", "1")
		req.Header.Set("X-Forwarded-For", "1.2.3.4")
		req.Header.Set("X-Kept", "yes")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", host, resp.StatusCode, body)
		}
		wantBody(t, body, host+" host="+host+".example.test sni= path=/p?a=1;b=2", "X-Kept: yes", "X-Forwarded-For: 1.2.3.4")
		for _, gone := range []string{"Proxy-", "X-Hop"} {
			if strings.Contains(body, gone) {
				t.Fatalf("%s: upstream saw %s: %s", host, gone, body)
			}
		}
		r := h.record("the forwarded request", byHost(KindProxyHTTP, host+".example.test"))
		if !r.Allowed || r.Port != 80 || !r.Addr.IsValid() || r.BytesDown != int64(len(b)) || !strings.HasPrefix(r.Rule, "route ") {
			t.Fatalf("record %+v", r)
		}
	}
	if n := h.accepts.Load(); n != 1 {
		t.Fatalf("%d connections to the proxy, want 1 kept alive", n)
	}
}

func TestExplicitOriginForm(t *testing.T) {
	h := newHarness(t, nil)
	status, body := get(t, http.DefaultClient, "http://"+h.addr+"/some/path")
	if status != http.StatusBadRequest {
		t.Fatalf("status %d", status)
	}
	wantBody(t, body, "hiloop gateway: this is the sandbox's egress proxy", "GET /some/path")
	h.record("the origin-form request", func(r Record) bool {
		return r.Kind == KindProxyHTTP && !r.Allowed && strings.Contains(r.Err, "origin-form")
	})
}

// rawHTTP sends a request on c and returns the status and body of the answer.
func rawHTTP(t *testing.T, c net.Conn, req string) (int, string) {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", req, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode >= 400 && !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("answer to %q is %s", req, ct)
	}
	return resp.StatusCode, string(b)
}

// wantReset checks that the proxy ended c with a reset, not a FIN.
func wantReset(t *testing.T, c net.Conn, send []byte) {
	t.Helper()
	// A reset that arrives before the write is reported by the write, and a read after it
	// sees only the end of the stream.
	if _, err := c.Write(send); errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return
	}
	_, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after %q: %v, want a connection reset", send[:min(len(send), 20)], err)
	}
}

// wantAlert checks that the proxy answered the ClientHello send on c with a fatal
// access_denied alert in a TLS 1.2 record (the version Go's ClientHello asks for), then the end
// of the stream: no reset that could destroy the alert before a client reads it.
func wantAlert(t *testing.T, c net.Conn, send []byte) {
	t.Helper()
	if _, err := c.Write(send); err != nil {
		t.Fatalf("sending the ClientHello: %v", err)
	}
	got, err := io.ReadAll(c)
	if want := []byte{21, 3, 3, 0, 2, 2, 49}; err != nil || !bytes.Equal(got, want) {
		t.Fatalf("answer to a ClientHello: %x, %v; want the access_denied alert %x and the end", got, err, want)
	}
}

// The alert's record version is the one the ClientHello asked for, at most TLS 1.2's.
func TestAlertVersion(t *testing.T) {
	p := &Proxy{}
	for _, tc := range []struct {
		name  string
		hello []byte
		minor byte
	}{
		{"TLS 1.3 (legacy 1.2)", clientHello(t, "x.example.test"), 3},
		{"TLS 1.0 only", []byte{22, 3, 1, 0, 50, 1, 0, 0, 46, 3, 1}, 1},
		{"TLS 1.1 only", []byte{22, 3, 1, 0, 50, 1, 0, 0, 46, 3, 2}, 2},
		{"a version from the future", []byte{22, 3, 1, 0, 50, 1, 0, 0, 46, 3, 9}, 3},
		{"too short to say", []byte{22, 3, 1}, 3},
	} {
		client, server := net.Pipe()
		go p.sendAlert(server, tc.hello)
		got, _ := io.ReadAll(client)
		client.Close()
		if want := []byte{21, 3, tc.minor, 0, 2, 2, 49}; !bytes.Equal(got, want) {
			t.Errorf("%s: %x, want %x", tc.name, got, want)
		}
	}
}

func TestDenied(t *testing.T) {
	h := newHarness(t, nil)
	sni := func(name string) []byte { return clientHello(t, name) }
	type tc struct {
		name  string
		dst   string // a transparent connection to it; "" = the explicit proxy
		send  []byte
		reset bool   // else a 403 answer
		alert bool   // a TLS access_denied alert
		host  string // in the record
		rule  string // in the answer and, unless audit says otherwise, the record
		audit string // in the record: with the address a name resolved to, which the answer never names
	}
	const (
		allowCIDR = "sandboxd --egress-allow-cidr allows it"
		route     = "reached only through sandboxd --gateway-resolve"
	)
	tests := []tc{
		{name: "http literal private", dst: "10.0.0.1:80", send: []byte("GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n"), host: "10.0.0.1", rule: "10.0.0.1 is a private address (RFC 1918); " + allowCIDR},
		{name: "http literal metadata", dst: "169.254.169.254:80", send: []byte("GET /latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"), host: "169.254.169.254", rule: "169.254.169.254 is the cloud metadata address"},
		{name: "http literal loopback", dst: "127.0.0.1:80", send: []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), host: "127.0.0.1", rule: "127.0.0.1 is a loopback address; a service on the host is " + route},
		{name: "http no host, by address", dst: "127.0.0.1:80", send: []byte("GET / HTTP/1.0\r\n\r\n"), rule: "127.0.0.1 is a loopback address"},
		{name: "http name private", dst: public.String() + ":80", send: []byte("GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n"), host: "evil.example.test", rule: "evil.example.test resolves to a private address (RFC 1918); " + allowCIDR, audit: "evil.example.test resolves to 10.0.0.1, a private address (RFC 1918)"},
		{name: "http name metadata", dst: public.String() + ":80", send: []byte("GET / HTTP/1.1\r\nHost: meta.example.test\r\n\r\n"), host: "meta.example.test", rule: "meta.example.test resolves to the cloud metadata address", audit: "resolves to 169.254.169.254, the cloud metadata address"},
		{name: "http name loopback", dst: public.String() + ":80", send: []byte("GET / HTTP/1.1\r\nHost: loop.example.test\r\n\r\n"), host: "loop.example.test", rule: "loop.example.test resolves to a loopback address; a service on the host is " + route, audit: "resolves to 127.0.0.1, a loopback address"},
		{name: "http name all denied", dst: public.String() + ":80", send: []byte("GET / HTTP/1.1\r\nHost: mixed.example.test\r\n\r\n"), host: "mixed.example.test", rule: "mixed.example.test resolves to a private address", audit: "resolves to 10.0.0.1"},
		{name: "http localhost", dst: public.String() + ":80", send: []byte("GET / HTTP/1.1\r\nHost: localhost:8080\r\n\r\n"), host: "localhost", rule: "localhost resolves to a loopback address; a service on the host is " + route, audit: "localhost resolves to 127.0.0.1, a loopback address"},
		{name: "tls name private", dst: public.String() + ":443", send: sni("evil.example.test"), alert: true, host: "evil.example.test", audit: "resolves to 10.0.0.1"},
		{name: "tls name metadata", dst: public.String() + ":443", send: sni("meta.example.test"), alert: true, host: "meta.example.test", audit: "cloud metadata"},
		{name: "tls name loopback", dst: public.String() + ":443", send: sni("loop.example.test"), alert: true, host: "loop.example.test", audit: "loopback"},
		{name: "tls localhost", dst: public.String() + ":443", send: sni("svc.localhost"), alert: true, host: "svc.localhost", audit: "svc.localhost resolves to 127.0.0.1, a loopback address"},
		{name: "tls no sni metadata", dst: "169.254.169.254:443", send: sni(""), alert: true, audit: "169.254.169.254 is the cloud metadata address"},
		{name: "tls no sni loopback", dst: "127.0.0.1:443", send: sni(""), alert: true, audit: "127.0.0.1 is a loopback address"},
		{name: "tcp private", dst: "10.0.0.1:22", send: []byte("SSH-2.0-OpenSSH_9.2\r\n"), reset: true, audit: "10.0.0.1 is a private address"},
		{name: "tcp ula", dst: "[fd00::1]:22", send: []byte{0, 1, 2}, reset: true, audit: "fd00::1 is a unique local address"},
		{name: "tcp synthetic unknown", dst: "198.18.9.9:22", send: []byte{0, 1, 2}, reset: true, audit: "198.18.9.9 is a benchmarking address"},
		{name: "connect literal private", send: []byte("CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 10.0.0.1:443\r\n\r\n"), host: "10.0.0.1", rule: "10.0.0.1 is a private address (RFC 1918)"},
		{name: "connect literal loopback", send: []byte("CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n"), host: "127.0.0.1", rule: "loopback address; a service on the host is " + route},
		{name: "connect mapped loopback", send: []byte("CONNECT [::ffff:127.0.0.1]:22 HTTP/1.1\r\nHost: x\r\n\r\n"), host: "127.0.0.1", rule: "127.0.0.1 is a loopback address"},
		{name: "connect name metadata", send: []byte("CONNECT meta.example.test:443 HTTP/1.1\r\nHost: meta.example.test:443\r\n\r\n"), host: "meta.example.test", rule: "meta.example.test resolves to the cloud metadata address; " + allowCIDR, audit: "resolves to 169.254.169.254, the cloud metadata address"},
		{name: "connect localhost", send: []byte("CONNECT localhost:5432 HTTP/1.1\r\nHost: localhost:5432\r\n\r\n"), host: "localhost", rule: "localhost resolves to a loopback address", audit: "localhost resolves to 127.0.0.1"},
		{name: "forward name private", send: []byte("GET http://evil.example.test/ HTTP/1.1\r\nHost: evil.example.test\r\n\r\n"), host: "evil.example.test", rule: "evil.example.test resolves to a private address", audit: "resolves to 10.0.0.1"},
		{name: "forward localhost", send: []byte("GET http://LocalHost.:8080/ HTTP/1.1\r\nHost: localhost\r\n\r\n"), host: "localhost", rule: "localhost resolves to a loopback address", audit: "localhost resolves to 127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c net.Conn
			kind := KindProxyHTTP
			if strings.HasPrefix(tt.name, "connect") {
				kind = KindConnect
			}
			if tt.dst == "" {
				c = h.dialExplicit()
			} else {
				c = h.dialTransparent(netip.MustParseAddrPort(tt.dst))
				kind = strings.Fields(tt.name)[0]
			}
			var body string
			switch {
			case tt.alert:
				wantAlert(t, c, tt.send)
			case tt.reset:
				wantReset(t, c, tt.send)
			default:
				var status int
				status, body = rawHTTP(t, c, string(tt.send))
				if status != http.StatusForbidden {
					t.Fatalf("status %d: %s", status, body)
				}
				wantBody(t, body, "hiloop gateway: ", tt.rule)
			}
			audit := tt.audit
			if audit == "" {
				audit, _, _ = strings.Cut(tt.rule, ";")
			}
			rec := h.record(tt.name, func(r Record) bool { return r.Kind == kind && r.Host == tt.host })
			if rec.Allowed || !strings.Contains(rec.Rule, audit) || !rec.Addr.IsValid() || rec.BytesDown != 0 || rec.BytesUp != 0 {
				t.Fatalf("record %+v", rec)
			}
			// The sandbox learns no address it did not ask for.
			if _, err := netip.ParseAddr(tt.host); err != nil && tt.host != "" && strings.Contains(body, rec.Addr.Addr().String()) {
				t.Fatalf("the answer names %s, the address %s resolved to: %q", rec.Addr.Addr(), tt.host, body)
			}
		})
	}
}

// An operator's --egress-allow-cidr opens a denied range.
func TestAllowCIDR(t *testing.T) {
	h := newHarness(t, func(p *Proxy) {
		p.Policy = &AddrPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Local: noLocal}
	})
	web := serverAddr(h.u.web)
	c := h.transparentClient(web, nil)
	status, body := get(t, c, "http://"+web.String()+"/allowed")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	wantBody(t, body, "web host="+web.String())
	status, body = get(t, h.explicitClient(), "http://loop.example.test:"+strconv.Itoa(int(web.Port()))+"/by-name")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	wantBody(t, body, "web host=loop.example.test")
}

func TestUpstreamFailures(t *testing.T) {
	h := newHarness(t, nil)
	for _, tt := range []struct {
		name, dst, send, host, msg string
	}{
		{"http unknown name", public.String() + ":80", "GET / HTTP/1.1\r\nHost: nosuch.example.test\r\n\r\n", "nosuch.example.test", "cannot resolve nosuch.example.test: no such host"},
		{"http refused", public.String() + ":80", "GET / HTTP/1.1\r\nHost: refused.example.test\r\n\r\n", "refused.example.test", "connection refused"},
		{"connect refused", "", "CONNECT refused.example.test:80 HTTP/1.1\r\nHost: x\r\n\r\n", "refused.example.test", "cannot connect to refused.example.test:80 (" + h.u.closed.String() + "): connection refused"},
		{"connect unknown name", "", "CONNECT nosuch.example.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", "nosuch.example.test", "cannot resolve nosuch.example.test"},
		{"forward unknown name", "", "GET http://nosuch.example.test/ HTTP/1.1\r\nHost: nosuch.example.test\r\n\r\n", "nosuch.example.test", "cannot resolve"},
		{"forward refused", "", "GET http://refused.example.test/ HTTP/1.1\r\nHost: refused.example.test\r\n\r\n", "refused.example.test", "connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c net.Conn
			if tt.dst == "" {
				c = h.dialExplicit()
			} else {
				c = h.dialTransparent(netip.MustParseAddrPort(tt.dst))
			}
			status, body := rawHTTP(t, c, tt.send)
			if status != http.StatusBadGateway {
				t.Fatalf("status %d: %s", status, body)
			}
			wantBody(t, body, "hiloop gateway: ", tt.msg)
			r := h.record(tt.name, func(r Record) bool { return r.Host == tt.host })
			if !r.Allowed || !strings.Contains(r.Err, tt.msg) {
				t.Fatalf("record %+v", r)
			}
		})
	}
}

func TestGarbage(t *testing.T) {
	h := newHarness(t, nil)
	garbage := make([]byte, 3000)
	seeded(7).Read(garbage)
	garbage[0] = 0x16 // looks like TLS for a moment
	t.Run("explicit", func(t *testing.T) {
		c := h.dialExplicit()
		c.Write(garbage)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 400 ") {
			t.Fatalf("answer %q, %v", line, err)
		}
		r := h.record("the garbage", func(r Record) bool { return r.Kind == KindProxyHTTP })
		if r.Allowed || !strings.HasPrefix(r.Err, "bad request: 400") {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("transparent to a routed host", func(t *testing.T) {
		c := h.dialTransparent(netip.MustParseAddrPort("198.18.0.3:7"))
		c.Write(garbage)
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		if err != nil || !bytes.Equal(got, garbage) {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(garbage), len(got), err)
		}
		r := h.record("the garbage", byHost(KindTCP, "echo.example.test"))
		if !r.Allowed || r.BytesUp != int64(len(garbage)) || r.BytesDown != int64(len(garbage)) {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("transparent to a denied address", func(t *testing.T) {
		wantReset(t, h.dialTransparent(netip.MustParseAddrPort("10.9.9.9:443")), garbage)
		h.record("the garbage", func(r Record) bool { return r.Kind == KindTCP && strings.Contains(r.Rule, "10.9.9.9") })
	})
}

func TestSlowClient(t *testing.T) {
	h := newHarness(t, func(p *Proxy) { p.HeaderTimeout = 200 * time.Millisecond })
	t.Run("transparent http", func(t *testing.T) {
		c := h.dialTransparent(netip.AddrPortFrom(public, 80))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: web.exa")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("answer %v, %v", resp, err)
		}
		h.record("the slow request", func(r Record) bool {
			return r.Kind == KindHTTP && strings.Contains(r.Err, "no complete request head within 200ms")
		})
	})
	t.Run("transparent tls", func(t *testing.T) {
		wantReset(t, h.dialTransparent(netip.AddrPortFrom(public, 443)), clientHello(t, "api.example.test")[:50])
		h.record("the slow ClientHello", func(r Record) bool {
			return r.Kind == KindTLS && strings.Contains(r.Err, "no complete TLS ClientHello")
		})
	})
	t.Run("explicit", func(t *testing.T) {
		c := h.dialExplicit()
		io.WriteString(c, "GET http://web.example.test/ HTTP/1.1\r\nHost: web.exa")
		if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
			t.Fatalf("answer %q, %v; want the connection closed", b, err)
		}
		h.record("the slow request", func(r Record) bool {
			return r.Kind == KindProxyHTTP && strings.Contains(r.Err, "no complete request head")
		})
	})
}

// A client that sends nothing is carried by address: the server speaks first.
func TestServerSpeaksFirst(t *testing.T) {
	h := newHarness(t, nil)
	c := h.dialTransparent(netip.MustParseAddrPort("198.18.0.4:25"))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != "220 banner.example.test ESMTP\r\n" {
		t.Fatalf("banner %q, %v", line, err)
	}
	io.WriteString(c, "QUIT\r\n")
	if line, err = br.ReadString('\n'); err != nil || line != "QUIT\r\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
	c.Close()
	r := h.record("the banner connection", byHost(KindTCP, "banner.example.test"))
	if !r.Allowed || r.BytesUp != 6 || r.BytesDown != int64(len("220 banner.example.test ESMTP\r\nQUIT\r\n")) {
		t.Fatalf("record %+v", r)
	}
}

// hashCopy sends n seeded bytes on c while reading everything back, and returns both hashes.
func exchange(t *testing.T, c net.Conn, n int64) (sent, got string) {
	t.Helper()
	sh, gh := sha256.New(), sha256.New()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(gh, c)
		done <- err
	}()
	if _, err := io.CopyN(io.MultiWriter(c, sh), seeded(uint64(n)), n); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(sh.Sum(nil)), hex.EncodeToString(gh.Sum(nil))
}

func TestLargeBodies(t *testing.T) {
	h := newHarness(t, nil)
	const n = 32 << 20
	t.Run("transparent tcp", func(t *testing.T) {
		sent, got := exchange(t, h.dialTransparent(netip.MustParseAddrPort("198.18.0.3:7")), n)
		if sent != got {
			t.Fatalf("echo differs: sent %s, got %s", sent, got)
		}
		r := h.record("the echo", byHost(KindTCP, "echo.example.test"))
		if r.BytesUp != n || r.BytesDown != n || r.Err != "" {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("connect", func(t *testing.T) {
		c := h.dialExplicit()
		br := bufio.NewReader(c)
		io.WriteString(c, "CONNECT echo.example.test:7 HTTP/1.1\r\nHost: echo.example.test:7\r\n\r\n")
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 || br.Buffered() != 0 {
			t.Fatalf("answer %v, %v", resp, err)
		}
		sent, got := exchange(t, c, n)
		if sent != got {
			t.Fatalf("echo differs: sent %s, got %s", sent, got)
		}
		r := h.record("the tunnel", byHost(KindConnect, "echo.example.test"))
		if r.BytesUp != n || r.BytesDown != n {
			t.Fatalf("record %+v", r)
		}
	})
	for _, mode := range []string{"transparent", "explicit"} {
		t.Run(mode+" http", func(t *testing.T) {
			c := h.explicitClient()
			if mode == "transparent" {
				c = h.transparentClient(netip.MustParseAddrPort("198.18.0.2:80"), nil)
			}
			want := sha256.New()
			io.CopyN(want, seeded(n), n)
			resp, err := c.Post("http://web.example.test/sum", "application/octet-stream", io.LimitReader(seeded(n), n))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != hex.EncodeToString(want.Sum(nil)) {
				t.Fatalf("upstream hashed the upload as %s", b)
			}
			resp, err = c.Get(fmt.Sprintf("http://web.example.test/bytes?n=%d&seed=%d", n, n))
			if err != nil {
				t.Fatal(err)
			}
			got := sha256.New()
			k, err := io.Copy(got, resp.Body)
			resp.Body.Close()
			if err != nil || k != n || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
				t.Fatalf("download of %d bytes: %d bytes, %v, hash differs: %v", n, k, err, !bytes.Equal(got.Sum(nil), want.Sum(nil)))
			}
		})
	}
}

// A client that closes its sending side still gets the answer.
func TestHalfClose(t *testing.T) {
	h := newHarness(t, nil)
	for _, dst := range []string{"198.18.0.5:9", "explicit"} {
		t.Run(dst, func(t *testing.T) {
			kind := KindTCP
			var c net.Conn
			if dst == "explicit" {
				kind = KindConnect
				c = h.dialExplicit()
				br := bufio.NewReader(c)
				io.WriteString(c, "CONNECT sum.example.test:9 HTTP/1.1\r\nHost: x\r\n\r\n")
				if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
					t.Fatalf("answer %v, %v", resp, err)
				}
			} else {
				c = h.dialTransparent(netip.MustParseAddrPort(dst))
			}
			payload := []byte("the whole request, then EOF")
			c.Write(payload)
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			want := sha256.Sum256(payload)
			if err != nil || string(got) != hex.EncodeToString(want[:]) {
				t.Fatalf("answer %q, %v", got, err)
			}
			r := h.record("the half-closed connection", byHost(kind, "sum.example.test"))
			if r.BytesUp != int64(len(payload)) || r.BytesDown != 64 || r.Err != "" {
				t.Fatalf("record %+v", r)
			}
		})
	}
}

func TestConnectionCap(t *testing.T) {
	h := newHarness(t, func(p *Proxy) { p.MaxConns = 2 })
	echo := netip.MustParseAddrPort("198.18.0.3:7")
	ping := func(c net.Conn) error {
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		_, err := io.ReadFull(c, make([]byte, 1))
		return err
	}
	a, b := h.dialTransparent(echo), h.dialTransparent(echo)
	for _, c := range []net.Conn{a, b} {
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := h.transparentDialer(echo)(context.Background(), "tcp", ""); err == nil {
		defer c.Close()
		wantReset(t, c, []byte("x"))
	} else if !errors.Is(err, syscall.ECONNRESET) { // the reset can beat connect's return
		t.Fatal(err)
	}
	h.record("the refused connection", func(r Record) bool {
		return strings.Contains(r.Err, "too many connections from this sandbox (limit 2)")
	})
	a.Close()
	h.record("the first connection", byHost(KindTCP, "echo.example.test"))
	if err := ping(h.dialTransparent(echo)); err != nil {
		t.Fatalf("a connection after one ended: %v", err)
	}
	if err := ping(b); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestPanicEndsOnlyItsConnection(t *testing.T) {
	var logged syncBuffer
	h := newHarness(t, func(p *Proxy) { p.Log = slog.New(slog.NewTextHandler(&logged, nil)) })
	src := h.clientIP()
	h.mu.Lock()
	h.panics[src] = true
	h.mu.Unlock()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}).Dial("tcp", h.addr)
	if err == nil {
		defer c.Close()
		wantReset(t, c, nil)
	} else if !errors.Is(err, syscall.ECONNRESET) { // the reset can beat connect's return
		t.Fatal(err)
	}
	h.record("the panic", func(r Record) bool { return strings.Contains(r.Err, "internal error: original destination exploded") })
	status, body := get(t, h.transparentClient(netip.AddrPortFrom(public, 80), nil), "http://web.example.test/")
	if status != 200 {
		t.Fatalf("after a panic: status %d: %s", status, body)
	}
	if l := logged.String(); !strings.Contains(l, "original destination exploded") || !strings.Contains(l, "proxy.go") {
		t.Fatalf("the panic's log has no stack: %s", l)
	}
}

func TestClose(t *testing.T) {
	h := newHarness(t, nil)
	c := h.dialTransparent(netip.MustParseAddrPort("198.18.0.3:7"))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() { served <- h.p.Serve(ln) }()
	h.p.Close()
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection after Close: %v", err)
	}
	select {
	case err := <-served:
		if !errors.Is(err, ErrProxyClosed) {
			t.Fatalf("Serve after Close: %v", err)
		}
	case <-testenv.Deadline(t):
		t.Fatal("Serve did not return after Close")
	}
	h.record("the closed connection", byHost(KindTCP, "echo.example.test"))
}

// curl, through the explicit proxy (CONNECT for https, absolute-form for http) and captured
// transparently (--connect-to sends it to the gateway's port as if redirected there).
func TestCurl(t *testing.T) {
	curl := testenv.RequireTool(t, "curl")
	h := newHarness(t, nil)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, h.u.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(curl, append([]string{"-sS", "--fail-with-body", "--cacert", ca}, args...)...)
		cmd.Env = append(os.Environ(), "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=", "ALL_PROXY=", "all_proxy=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	wantBody(t, run("--proxy", h.url.String(), "https://api.example.test/curl"), "api host=api.example.test sni=api.example.test path=/curl")
	h.record("curl's tunnel", byHost(KindConnect, "api.example.test"))
	wantBody(t, run("--proxy", h.url.String(), "http://web.example.test/curl"), "web host=web.example.test sni= path=/curl")
	h.record("curl's request", byHost(KindProxyHTTP, "web.example.test"))

	src := h.clientIP()
	h.mu.Lock()
	h.dsts[src] = netip.AddrPortFrom(public, 443)
	h.mu.Unlock()
	_, port, _ := net.SplitHostPort(h.addr)
	wantBody(t, run("--interface", src.String(), "--connect-to", "api.example.test:443:127.0.0.1:"+port, "https://api.example.test/captured"),
		"api host=api.example.test sni=api.example.test path=/captured")
	h.record("curl's captured connection", byHost(KindTLS, "api.example.test"))
}
