//go:build linux

package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// A sandbox's secrets change at once: a binding set while it runs makes the next connection to
// the host terminated with the real value injected, and taking it away makes the next request,
// even on a connection already terminated, carry the placeholder unchanged.
func TestGatewaySetSecrets(t *testing.T) {
	ns := newNetNS(t)
	upPool, _, leaf := newCA(t)
	var got atomic.Pointer[string] // the X-Api-Key the host got last: its echo reaches the client scrubbed
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Api-Key")
		got.Store(&key)
		fmt.Fprintf(rw, "x-api-key=%s\n", key)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	up.StartTLS()
	t.Cleanup(up.Close)

	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{
		Routes:      []Route{{Host: "api.example.test", Port: 443, To: serverAddr(up)}},
		CA:          ca,
		UpstreamCAs: upPool,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	if err := g.Attach("id1", "box", ns, nil); err != nil {
		t.Fatal(err)
	}

	// A client in the sandbox trusting both CAs, so the issuer tells terminated from tunnelled.
	roots := upPool.Clone()
	roots.AddCert(ca.Certificate())
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			// 198.18.0.1 is the route's synthetic address; the capture takes it to the gateway.
			return inNamespace(ns, func() (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, "198.18.0.1:443")
			})
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	get := func() (issuer, body string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://api.example.test/", nil)
		req.Header.Set("X-Api-Key", phKey)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.TLS.PeerCertificates[0].Issuer.CommonName, string(b)
	}
	const tunnelled, terminated = "gateway test CA", "hiloop gateway CA"

	if issuer, body := get(); issuer != tunnelled || body != "x-api-key="+phKey+"\n" {
		t.Fatalf("without secrets: issuer %q, body %q; want tunnelled, placeholder unchanged", issuer, body)
	}

	g.SetSecrets("id1", func(string) []Binding {
		return []Binding{{Name: "api-key", Header: "X-Api-Key", Hosts: []string{"api.example.test"}, Placeholder: phKey,
			Value: func() []byte { return []byte("real-key-value") }}}
	})
	tr.CloseIdleConnections() // the tunnel already open stays a tunnel; the next connection is new
	if issuer, body := get(); issuer != terminated || *got.Load() != "real-key-value" || body != "x-api-key="+phKey+"\n" {
		t.Fatalf("with a secret: issuer %q, the host got %q, body %q; want terminated, value injected, echo scrubbed", issuer, *got.Load(), body)
	}

	g.SetSecrets("id1", nil)
	if issuer, body := get(); issuer != terminated || body != "x-api-key="+phKey+"\n" {
		t.Fatalf("after the secret went, same connection: issuer %q, body %q; want the placeholder unchanged", issuer, body)
	}
	tr.CloseIdleConnections()
	if issuer, _ := get(); issuer != tunnelled {
		t.Fatalf("after the secret went, a new connection: issuer %q, want tunnelled", issuer)
	}

	// A sandbox that is not attached is left alone.
	g.SetSecrets("nobody", func(string) []Binding { return nil })
}

// A capture prepared ahead (a spare's) holds the connections made before the attach, and the
// attach serves them under its own policy: a closed sandbox's early connection is refused, an
// allowed host's is carried. A capture never attached goes with Detach.
func TestGatewayPrepareThenAttach(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "host %s\n", r.Host)
	}))
	t.Cleanup(up.Close)
	g, err := New(Config{Routes: []Route{
		{Host: "allowed.example.test", Port: 80, To: serverAddr(up)},
		{Host: "other.example.test", Port: 80, To: serverAddr(up)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	ns := newNetNS(t)
	if err := g.Prepare("spare", ns); err != nil {
		t.Fatal(err)
	}
	// Connected and sent before the attach: they wait in the listener's backlog.
	get := func(host string) func() string {
		conn, err := inNamespace(ns, func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+fmt.Sprint(ProxyPort)) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host, host)
		return func() string {
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return "error: " + err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
	}
	allowed, other := get("allowed.example.test"), get("other.example.test")
	rule, err := ParseHostRule("allowed.example.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Attach("spare", "box", ns, &HostPolicy{Closed: true, Allow: []HostRule{rule}}); err != nil {
		t.Fatal(err)
	}
	if got := allowed(); got != "200 host allowed.example.test\n" {
		t.Errorf("allowed host, connected before the attach: %q", got)
	}
	if got := other(); !strings.HasPrefix(got, "403") {
		t.Errorf("a host the policy closes, connected before the attach: %q, want 403", got)
	}

	// A capture prepared in a namespace the sandbox no longer has (started again since) is
	// dropped, and the attach makes one in the namespace it is given.
	old, fresh := newNetNS(t), newNetNS(t)
	if err := g.Prepare("restarted", old); err != nil {
		t.Fatal(err)
	}
	if err := g.Attach("restarted", "box2", fresh, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Detach("restarted") })
	for _, tc := range []struct {
		ns     *os.File
		listen bool
	}{{old, false}, {fresh, true}} {
		c, err := inNamespace(tc.ns, func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+fmt.Sprint(ProxyPort)) })
		if err == nil {
			c.Close()
		}
		if (err == nil) != tc.listen {
			t.Errorf("proxy listening in the namespace: %v, want %v", err == nil, tc.listen)
		}
	}

	// A capture never attached is dropped by Detach: its listeners close.
	ns2 := newNetNS(t)
	if err := g.Prepare("gone", ns2); err != nil {
		t.Fatal(err)
	}
	g.Detach("gone")
	_, err = inNamespace(ns2, func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+fmt.Sprint(ProxyPort)) })
	if err == nil {
		t.Error("the proxy still listens after Detach of a prepared capture")
	}
}
