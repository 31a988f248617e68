package gateway

import (
	"context"
	"crypto/tls"
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
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
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

// A connection the gateway tunnels holds at most ConnFDs descriptors in the daemon, the figure
// the default budget is derived from: counted while 20 tunnels are idle.
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
	if per := float64(fds()-before-2*n) / n; per > ConnFDs {
		t.Fatalf("an idle tunnel holds %.1f descriptors in the gateway, more than ConnFDs (%d) the budget counts", per, ConnFDs)
	} else {
		t.Logf("an idle tunnel holds %.1f descriptors in the gateway", per)
	}
}
