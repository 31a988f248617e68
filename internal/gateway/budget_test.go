package gateway

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hiloop/hiloop/internal/testenv"
)

var echoDst = netip.MustParseAddrPort("198.18.0.3:7")

// ping sends a byte through an echo connection and reads it back: the gateway has admitted
// the connection and carries it. The byte starts neither TLS nor HTTP, so the gateway takes
// the connection for raw TCP at once.
func ping(c net.Conn) error {
	if _, err := c.Write([]byte{0}); err != nil {
		return err
	}
	_, err := io.ReadFull(c, make([]byte, 1))
	return err
}

// open makes n echo connections through h that work.
func (h *harness) open(n int) []net.Conn {
	h.t.Helper()
	var cs []net.Conn
	for range n {
		c := h.dialTransparent(echoDst)
		if err := ping(c); err != nil {
			h.t.Fatalf("sandbox %s, connection %d: %v", h.p.Sandbox, len(cs)+1, err)
		}
		cs = append(cs, c)
	}
	return cs
}

// refused checks that an echo connection through h is reset and audited with why.
func (h *harness) refused(why string) {
	h.t.Helper()
	c, err := h.transparentDialer(echoDst)(context.Background(), "tcp", "")
	if err != nil && !errors.Is(err, syscall.ECONNRESET) { // the reset can beat connect's return
		h.t.Fatal(err)
	}
	if err == nil {
		defer c.Close()
		if err := ping(c); err == nil {
			h.t.Fatalf("sandbox %s: a connection was carried, want a reset for %q", h.p.Sandbox, why)
		} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			h.t.Fatalf("sandbox %s: %v, want a connection reset", h.p.Sandbox, err)
		}
	}
	h.record(why, func(r Record) bool { return strings.Contains(r.Err, why) })
}

// The daemon's budget is shared by every sandbox: none holds more than half of it, a sandbox's
// connection over a full budget is refused unless it is within the sandbox's reserve, and then
// the newest connection of the sandbox holding the most is reset to make room for it.
func TestBudgetSharedBySandboxes(t *testing.T) {
	b := &Budget{Max: 6, Reserve: 1}
	box := func(name string) *harness {
		return newHarness(t, func(p *Proxy) { p.Sandbox, p.Budget = name, b })
	}
	a, bb, c, d := box("a"), box("b"), box("c"), box("d")

	as := a.open(3)
	a.refused("too many connections from this sandbox (limit 3)") // half of the budget
	bs := bb.open(2)
	cs := c.open(1) // the budget is full
	c.refused("too many gateway connections on this daemon (limit 6, sandboxd --gateway-max-conns)")

	// d has none: its first is within its reserve, and takes a's newest.
	ds := d.open(1)
	if err := ping(as[2]); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("a's newest connection: %v, want a connection reset", err)
	}
	a.record("the connection reset to make room", func(r Record) bool {
		return strings.Contains(r.Err, "reset to make room for another sandbox's connection: the daemon's gateway connections are at their limit (6, ")
	})
	d.refused("too many gateway connections on this daemon (limit 6,") // beyond its reserve
	for _, c := range [][]net.Conn{as[:2], bs, cs, ds} {
		for _, c := range c {
			if err := ping(c); err != nil {
				t.Fatalf("a connection the budget kept: %v", err)
			}
		}
	}

	// A connection that ends gives its place back, to whoever comes next.
	bs[0].Close()
	bb.record("b's first connection", byHost(KindTCP, "echo.example.test"))
	c.open(1)
	c.refused("too many gateway connections on this daemon")
}

// Without a daemon-wide bound, each sandbox's own cap still holds.
func TestBudgetNoDaemonBound(t *testing.T) {
	b := &Budget{}
	h := newHarness(t, func(p *Proxy) { p.MaxConns, p.Budget = 2, b })
	other := newHarness(t, func(p *Proxy) { p.MaxConns, p.Budget = 2, b })
	h.open(2)
	h.refused("too many connections from this sandbox (limit 2)")
	other.open(2)
}

// A closed proxy's connections give their places back and it is never chosen to make room.
func TestBudgetAfterClose(t *testing.T) {
	b := &Budget{Max: 4, Reserve: 1}
	a := newHarness(t, func(p *Proxy) { p.Sandbox, p.Budget = "a", b })
	a.open(2)
	a.p.Close()
	b.mu.Lock()
	shares := len(b.shares)
	b.mu.Unlock()
	if shares != 0 {
		t.Fatalf("%d shares after Close", shares)
	}
	for range 2 {
		a.record("a closed connection", byHost(KindTCP, "echo.example.test"))
	}
	b.mu.Lock()
	held := b.held
	b.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d connections held after every one ended", held)
	}
	newHarness(t, func(p *Proxy) { p.Budget = b }).open(2)
}

func TestDefaultBudget(t *testing.T) {
	for _, tc := range []struct {
		nofile       uint64
		def, maxConn int
	}{
		{1024, 85, 85},
		{2048, 170, 170},
		{20000, 1666, 3162},
		{524288, 43690, 87210},
		{1 << 63, 65536, 1<<31 - 1},
	} {
		if got := DefaultBudget(tc.nofile); got != tc.def {
			t.Errorf("DefaultBudget(%d) = %d, want %d", tc.nofile, got, tc.def)
		}
		if got := MaxBudget(tc.nofile); got != tc.maxConn {
			t.Errorf("MaxBudget(%d) = %d, want %d", tc.nofile, got, tc.maxConn)
		}
	}
}

// A terminated HTTP/2 connection to a real host that speaks only HTTP/1.1 needs an upstream
// connection per request in flight: each beyond the first takes a place in the budget, so one
// client connection cannot hold hundreds of descriptors.
func TestBudgetTerminatedUpstreams(t *testing.T) {
	pool, _, leaf := newCA(t)
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
		io.WriteString(rw, "ok")
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}} // HTTP/1.1 only
	up.StartTLS()
	t.Cleanup(up.Close)
	w := newSecretWorld(t, func(p *Proxy) {
		p.Routes = append([]Route{{Host: "bound.example.test", Port: 443, To: serverAddr(up)}}, p.Routes...)
		p.UpstreamCAs = pool
		p.MaxConns = 1
	})
	c := w.client(t, false, true)
	first := make(chan string, 1)
	hreq := newRequest(t, "GET", "https://bound.example.test/hold", "")
	go func() {
		resp, err := c.Do(hreq)
		if err != nil {
			first <- err.Error()
			return
		}
		b, err := io.ReadAll(resp.Body)
		// Closed before the answer is sent: closeIdle below finds the connection idle only
		// once its last stream is done.
		resp.Body.Close()
		first <- fmt.Sprint(resp.StatusCode, " ", string(b), " ", err)
	}()
	select {
	case <-held:
	case <-testenv.Deadline(t):
		t.Fatal("the first request did not arrive")
	}
	// The same client connection (HTTP/2), a second request while the first is held.
	r := w.do(t, c, newRequest(t, "GET", "https://bound.example.test/second", ""))
	if r.proto != "HTTP/2.0" || r.status != http.StatusBadGateway || !strings.Contains(r.body, "too many connections from this sandbox (limit 1)") {
		t.Fatalf("second request: %+v", r)
	}
	close(hold)
	if r := <-first; r != "200 ok <nil>" {
		t.Fatalf("first request: %s", r)
	}
	closeIdle(c)
	w.record("the terminated connection", func(r Record) bool {
		return r.Terminated && strings.Contains(r.Err, "too many connections from this sandbox (limit 1)")
	})
}

// An idle connection the gateway tunnels holds its two sockets and no splice pipe, counted while
// 20 tunnels are idle. (ConnFDs, what the budget counts, is the worst case: a busy one.)
func TestConnFDs(t *testing.T) {
	// An upstream that echoes without splice(2), so that it holds no pipe of its own.
	plain := tcpServer(t, func(c net.Conn) {
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	})
	h := newHarness(t, func(p *Proxy) {
		p.Routes = append(p.Routes, Route{Host: "plain.example.test", Port: 7, To: addrPortOf(plain.Addr())})
	})
	tunnel := func() {
		c := h.dialExplicit()
		io.WriteString(c, "CONNECT plain.example.test:7 HTTP/1.1\r\nHost: plain.example.test:7\r\n\r\n")
		const ok = "HTTP/1.1 200 Connection established\r\n\r\n"
		b := make([]byte, len(ok))
		if _, err := io.ReadFull(c, b); err != nil || string(b) != ok {
			t.Fatalf("CONNECT: %q, %v", b, err)
		}
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
	}
	fds := func() int {
		e, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(e)
	}
	tunnel() // the first connection's one-time costs (the epoll descriptor, a resolver)
	const n = 20
	before := fds()
	for range n {
		tunnel()
	}
	// Each tunnel also holds the client's socket and the upstream's, in this process.
	// Idle, a tunnel holds its two sockets and no pipe (waitQueued): what is above 2 is the few
	// pipes splice's pool keeps for every copy to share, not one per tunnel.
	if per := float64(fds()-before-2*n) / n; per >= 3 {
		t.Fatalf("an idle tunnel holds %.1f descriptors in the gateway: it keeps a splice pipe while idle", per)
	} else {
		t.Logf("an idle tunnel holds %.1f descriptors in the gateway", per)
	}
}

// h2Frame is an HTTP/2 frame (RFC 9113 section 4.1), as far as these tests read them.
type h2Frame struct {
	typ, flags byte
	stream     uint32
	payload    []byte
}

// The frame types and the parameter these tests use.
const (
	h2Headers      = 0x1
	h2Settings     = 0x4
	h2WindowUpdate = 0x8
	h2MaxFrameSize = 0x5 // SETTINGS_MAX_FRAME_SIZE
	h2Preface      = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// What a peer may send before any SETTINGS or WINDOW_UPDATE says otherwise.
	h2DefaultFrame  = 16 << 10
	h2DefaultWindow = 65535
)

func readH2Frame(r io.Reader) (h2Frame, error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return h2Frame{}, err
	}
	f := h2Frame{typ: h[3], flags: h[4], stream: binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1),
		payload: make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))}
	_, err := io.ReadFull(r, f.payload)
	return f, err
}

func writeH2Frame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	n := len(payload)
	h := []byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags}
	_, err := w.Write(append(binary.BigEndian.AppendUint32(h, stream), payload...))
	return err
}

// maxFrame is the SETTINGS_MAX_FRAME_SIZE of a SETTINGS frame that is not an ACK: its value,
// else the protocol's default.
func (f h2Frame) maxFrame() uint32 {
	for p := f.payload; len(p) >= 6; p = p[6:] {
		if binary.BigEndian.Uint16(p) == h2MaxFrameSize {
			return binary.BigEndian.Uint32(p[2:])
		}
	}
	return h2DefaultFrame
}

// A terminated HTTP/2 connection lets neither side make the gateway hold much: the frames it
// takes are small (net/http keeps a buffer of the largest for the connection's life), and an
// upstream may send at most maxH2Window on a connection before the sandbox's client reads it.
func TestTerminatedH2Limits(t *testing.T) {
	pool, _, leaf := newCA(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type seen struct {
		frame  uint32 // the largest frame the gateway takes
		window uint32 // the connection's receive window the gateway opened
		err    error
	}
	upstream := make(chan seen, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			upstream <- seen{err: err}
			return
		}
		defer c.Close()
		s := seen{frame: h2DefaultFrame, window: h2DefaultWindow}
		defer func() { upstream <- s }()
		if _, s.err = io.ReadFull(c, make([]byte, len(h2Preface))); s.err != nil {
			return
		}
		for {
			f, err := readH2Frame(c)
			switch {
			case err != nil:
				s.err = err
				return
			case f.typ == h2Settings && f.flags&1 == 0:
				s.frame = f.maxFrame()
			case f.typ == h2WindowUpdate && f.stream == 0:
				s.window += binary.BigEndian.Uint32(f.payload) & (1<<31 - 1)
			case f.typ == h2Headers: // the request: what the gateway had to say came before it
				return
			}
		}
	}()
	w := newSecretWorld(t, func(p *Proxy) {
		p.Routes = append([]Route{{Host: "bound.example.test", Port: 443, To: addrPortOf(ln.Addr())}}, p.Routes...)
		p.UpstreamCAs = pool
	})

	// The sandbox's side: what the gateway's server asks of an HTTP/2 client.
	raw, err := w.transparentDialer(netip.AddrPortFrom(public, 443))(context.Background(), "tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c := tls.Client(raw, &tls.Config{RootCAs: w.roots, ServerName: "bound.example.test", NextProtos: []string{"h2"}})
	if err := c.Handshake(); err != nil || c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("handshake: %v, protocol %q", err, c.ConnectionState().NegotiatedProtocol)
	}
	io.WriteString(c, h2Preface)
	writeH2Frame(c, h2Settings, 0, 0, nil)
	for {
		f, err := readH2Frame(c)
		if err != nil {
			t.Fatal(err)
		}
		if f.typ == h2Settings && f.flags&1 == 0 {
			if n := f.maxFrame(); n > maxH2Frame {
				t.Errorf("the gateway takes frames of %d bytes from the sandbox's client, want at most %d", n, maxH2Frame)
			}
			break
		}
	}
	// GET https://bound.example.test/ so that the gateway goes upstream: HPACK's static table
	// for :method GET (2), :path / (4) and :scheme https (7), and :authority (1) as a literal.
	block := append([]byte{0x82, 0x84, 0x87, 0x41, byte(len("bound.example.test"))}, "bound.example.test"...)
	writeH2Frame(c, h2Headers, 0x4|0x1, 1, block) // END_HEADERS, END_STREAM

	var s seen
	select {
	case s = <-upstream:
	case <-testenv.Deadline(t):
		t.Fatal("the gateway did not go upstream")
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	if s.frame > maxH2Frame {
		t.Errorf("the gateway takes frames of %d bytes from the upstream, want at most %d", s.frame, maxH2Frame)
	}
	if s.window > h2DefaultWindow+maxH2Window {
		t.Errorf("the gateway lets the upstream send %d bytes a connection unread, want at most %d", s.window, h2DefaultWindow+maxH2Window)
	}
}
