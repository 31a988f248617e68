package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/testenv"
)

// An upstream's response headers are capped like a client's request head.
func TestForwardResponseHeaderCap(t *testing.T) {
	big := tcpServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Big: %s\r\nContent-Length: 0\r\n\r\n", strings.Repeat("a", 100<<10))
	})
	h := newHarness(t, func(p *Proxy) {
		p.Routes = append(p.Routes, Route{Host: "big.example.test", Port: 80, To: addrPortOf(big.Addr())})
	})
	status, body := get(t, h.explicitClient(), "http://big.example.test/")
	if status != http.StatusBadGateway {
		t.Fatalf("status %d: %s", status, body)
	}
}

// Close cancels a forwarded request's dial still under way.
func TestCloseCancelsForwardDial(t *testing.T) {
	dialing := make(chan context.Context, 1)
	h := newHarness(t, func(p *Proxy) {
		p.DialTimeout = time.Hour // only Close ends the dial
		p.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialing <- ctx
			<-ctx.Done()
			return nil, ctx.Err()
		}
	})
	go func() {
		resp, err := h.explicitClient().Get("http://web.example.test/")
		if err == nil {
			resp.Body.Close()
		}
	}()
	var ctx context.Context
	select {
	case ctx = <-dialing:
	case <-testenv.Deadline(t):
		t.Fatal("no dial")
	}
	h.p.Close()
	select {
	case <-ctx.Done():
	case <-testenv.Deadline(t):
		t.Fatal("the dial outlived Close")
	}
}

// A forwarded connection completed after Close is closed, not pooled.
func TestForwardDialAfterClose(t *testing.T) {
	h := newHarness(t, nil)
	h.p.Close()
	a, b := net.Pipe()
	defer b.Close()
	if _, err := h.p.track(a); err == nil {
		t.Fatal("tracked a connection after Close")
	}
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("the connection is still open")
	}
}

// TRACE on a terminated connection would echo the injected secret back: refused.
func TestTerminateRefusesTrace(t *testing.T) {
	w := newSecretWorld(t, nil)
	c := w.client(t, false, false)
	for _, m := range []string{"TRACE", "TRACK"} {
		r := w.do(t, c, newRequest(t, m, "https://bound.example.test/v1/x", "", "X-Api-Key", phKey))
		if r.status != http.StatusMethodNotAllowed || strings.Contains(r.body, "real-key-value") {
			t.Fatalf("%s: status %d: %s", m, r.status, r.body)
		}
	}
}

// Every spelling of a routed host in a forwarded URL takes the route the decision named.
func TestForwardNormalisesHost(t *testing.T) {
	h := newHarness(t, nil)
	c := h.explicitClient()
	for _, u := range []string{"http://WEB.Example.Test/", "http://web.example.test./"} {
		status, body := get(t, c, u)
		if status != 200 {
			t.Fatalf("%s: status %d: %s", u, status, body)
		}
		wantBody(t, body, "web host=")
	}
}
