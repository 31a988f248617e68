package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// A tunnel to one host cannot carry a ClientHello for another (a shared CDN's other customer).
func TestConnectInsideMustMatch(t *testing.T) {
	h := newHarness(t, nil)
	c := h.dialExplicit()
	io.WriteString(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
	buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
	if _, err := io.ReadFull(c, buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
		t.Fatalf("CONNECT: %q %v", buf, err)
	}
	wantAlert(t, c, clientHello(t, "other.example.test"))
	r := h.record("the refused tunnel", func(r Record) bool { return r.Kind == KindConnect })
	if r.Allowed || r.Rule != "CONNECT to api.example.test carried a request for other.example.test" {
		t.Fatalf("record %+v", r)
	}

	// The same name, in another case and with a trailing dot, is the same host.
	tc := tls.Client(h.dialExplicitTunnel("api.example.test:443"), &tls.Config{ServerName: "API.Example.Test", RootCAs: h.u.caPool})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("the same host: %v", err)
	}
	tc.Close()
}

// Plain HTTP in a tunnel: every request must name the CONNECT host.
func TestConnectInsideHTTP(t *testing.T) {
	h := newHarness(t, nil)
	c := h.dialExplicitTunnel("web.example.test:80")
	status, body := rawHTTP(t, c, "GET /one HTTP/1.1\r\nHost: WEB.example.test.\r\n\r\n")
	if status != 200 {
		t.Fatalf("first request: %d %s", status, body)
	}
	status, body = rawHTTP(t, c, "GET /two HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
	if status != http.StatusForbidden {
		t.Fatalf("second request to another host: %d %s", status, body)
	}
	wantBody(t, body, "CONNECT to web.example.test carried a request for other.example.test")
	h.record("the refused request", func(r Record) bool {
		return r.Kind == KindHTTP && r.Host == "other.example.test" && !r.Allowed && strings.HasPrefix(r.Rule, "CONNECT to web.example.test")
	})
}

// A kept-alive captured connection's later requests are decided by their own Host.
func TestTransparentHTTPEveryRequest(t *testing.T) {
	h := newHarness(t, nil)
	h.p.SetHostPolicy(mustPolicy(t, true, []string{"web.example.test"}, nil))
	c := h.dialTransparent(netip.AddrPortFrom(public, 80))
	status, body := rawHTTP(t, c, "GET /one HTTP/1.1\r\nHost: web.example.test\r\n\r\n")
	if status != 200 {
		t.Fatalf("first request: %d %s", status, body)
	}
	status, body = rawHTTP(t, c, "GET /two HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
	if status != http.StatusForbidden {
		t.Fatalf("second request to a denied host: %d %s", status, body)
	}
	h.record("the refused request", func(r Record) bool { return r.Kind == KindHTTP && r.Host == "other.example.test" && !r.Allowed })
}

// dialExplicitTunnel opens a CONNECT tunnel to target and returns the connection after the 200.
func (h *harness) dialExplicitTunnel(target string) net.Conn {
	h.t.Helper()
	c := h.dialExplicit()
	io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
	if _, err := io.ReadFull(c, buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
		h.t.Fatalf("CONNECT %s: %q %v", target, buf, err)
	}
	return c
}
