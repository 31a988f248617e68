package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/pkg/api"
)

// tlsDaemon is a real HTTPS server on loopback with a certificate signed by a real pki.CA,
// asking for (not requiring) a client certificate, as sandboxd's --listen does.
type tlsDaemon struct {
	srv         *httptest.Server
	ca          *pki.CA
	fingerprint string

	mu   sync.Mutex
	seen []*http.Request // every request's headers and TLS state
}

func newTLSDaemon(t *testing.T, handler http.Handler) *tlsDaemon {
	t.Helper()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), "test daemon CA")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := ca.Sign(&x509.Certificate{
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}, key.Public(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	d := &tlsDaemon{ca: ca, fingerprint: pki.Fingerprint(der)}
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.seen = append(d.seen, r)
		d.mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	d.srv.TLS = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.Pool(),
	}
	d.srv.StartTLS()
	t.Cleanup(d.srv.Close)
	return d
}

func (d *tlsDaemon) requests() []*http.Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*http.Request(nil), d.seen...)
}

// clientCert makes a key and has the daemon's CA sign a client certificate for user, as
// POST /v1/trust does, and writes both where TLSOptions reads them.
func (d *tlsDaemon) clientCert(t *testing.T, user string) (certFile, keyFile, fingerprint string) {
	t.Helper()
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("laptop")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := d.ca.SignClient(csrPEM, user, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, pemCert(cert.Raw), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pki.Fingerprint(cert.Raw)
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func versionHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.VersionInfo{Version: "tls-test"})
	})
}

// A pinned client reaches the server and presents its certificate, its token and Hiloop-As.
func TestTLSPinnedPresentsCredentials(t *testing.T) {
	d := newTLSDaemon(t, versionHandler())
	certFile, keyFile, certFP := d.clientCert(t, "alice")
	c, err := NewWithOptions(Options{
		Host:  d.srv.URL,
		Token: "hl_secret",
		As:    "bob",
		TLS:   &TLSOptions{Fingerprint: d.fingerprint, CertFile: certFile, KeyFile: keyFile},
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Version(context.Background())
	if err != nil || v.Version != "tls-test" {
		t.Fatalf("Version over pinned TLS = %+v, %v", v, err)
	}
	reqs := d.requests()
	if len(reqs) != 1 {
		t.Fatalf("the server saw %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		t.Fatal("the client presented no certificate")
	}
	if got := pki.Fingerprint(r.TLS.PeerCertificates[0].Raw); got != certFP || r.TLS.PeerCertificates[0].Subject.CommonName != "alice" {
		t.Errorf("the client presented %s (%s), want alice's %s", got, r.TLS.PeerCertificates[0].Subject.CommonName, certFP)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer hl_secret" {
		t.Errorf("Authorization = %q", got)
	}
	if got := r.Header.Get(api.AsHeader); got != "bob" {
		t.Errorf("%s = %q, want bob", api.AsHeader, got)
	}
	if r.TLS.Version < tls.VersionTLS12 {
		t.Errorf("TLS version %x", r.TLS.Version)
	}
}

// Another certificate at the pinned address is a hard error on every way in, naming both
// fingerprints and how to trust anew; the server never sees a request.
func TestTLSFingerprintMismatch(t *testing.T) {
	d := newTLSDaemon(t, versionHandler())
	pinned := "SHA256:" + strings.Repeat("A", 43)
	c, err := NewWithOptions(Options{Host: d.srv.URL, Token: "hl_secret", Remote: "myhost",
		TLS: &TLSOptions{Fingerprint: pinned}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		var mm *FingerprintMismatchError
		if !errors.As(err, &mm) {
			t.Fatalf("%s: %v (%T), want a *FingerprintMismatchError", what, err, err)
		}
		if mm.Pinned != pinned || mm.Got != d.fingerprint || mm.Remote != "myhost" {
			t.Errorf("%s: %+v", what, mm)
		}
		addr := strings.TrimPrefix(d.srv.URL, "https://")
		want := "the server at " + addr + " presents " + d.fingerprint + ", but remote myhost is pinned to " + pinned +
			": if the server's certificate was replaced on purpose, `hiloop remote remove myhost` and add it again with a new trust token"
		if err.Error() != want {
			t.Errorf("%s: message\n%s\nwant\n%s", what, err, want)
		}
	}
	_, err = c.Version(ctx)
	check("Version", err)
	_, err = c.Exec(ctx, "web", api.ExecRequest{Command: []string{"true"}}, ExecIO{})
	check("Exec", err)
	_, err = c.DialPort(ctx, "web", 80)
	check("DialPort", err)
	err = c.Stream(ctx, "s1", 0, func(api.SessionEvent) error { return nil })
	check("Stream", err)
	if n := len(d.requests()); n != 0 {
		t.Errorf("the server saw %d requests from a client that does not trust it", n)
	}
}

// Without a pin, an https:// host is verified by the system's roots: a daemon's own CA is not
// among them, so its certificate is refused rather than trusted silently.
func TestTLSWithoutPinVerifiesChain(t *testing.T) {
	d := newTLSDaemon(t, versionHandler())
	c, err := New(d.srv.URL, "hl_secret")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Version(context.Background())
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("Version without a pin against a self-made CA: %v, want x509.UnknownAuthorityError", err)
	}
	if n := len(d.requests()); n != 0 {
		t.Errorf("the server saw %d requests", n)
	}
}

// An exec over TLS streams (no descriptor handoff off the unix socket) on the WebSocket the
// pinned dial opened, with the credential in its upgrade request.
func TestTLSExecStreams(t *testing.T) {
	d := newTLSDaemon(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/web/exec" {
			http.NotFound(w, r)
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		if _, _, err := conn.Read(ctx); err != nil { // the ExecRequest
			return
		}
		started, _ := json.Marshal(api.ExecControl{Type: api.ControlStarted})
		exit, _ := json.Marshal(api.ExecControl{Type: api.ControlExit, ExitCode: 3})
		_ = conn.Write(ctx, websocket.MessageText, started)
		_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{api.StreamStdout}, "hello over tls\n"...))
		_ = conn.Write(ctx, websocket.MessageText, exit)
	}))
	certFile, keyFile, _ := d.clientCert(t, "alice")
	c, err := NewWithOptions(Options{Host: d.srv.URL, As: "bob",
		TLS: &TLSOptions{Fingerprint: d.fingerprint, CertFile: certFile, KeyFile: keyFile}})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe() // a file the unix socket would hand off
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var out []byte
	read := make(chan struct{})
	go func() { out, _ = io.ReadAll(pr); close(read) }()
	res, err := c.Exec(context.Background(), "web", api.ExecRequest{Command: []string{"echo"}}, ExecIO{Stdout: pw, HandOff: true})
	pw.Close()
	<-read
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || len(res.HandedOff) != 0 || string(out) != "hello over tls\n" {
		t.Errorf("exec over TLS = %+v, output %q", res, out)
	}
	r := d.requests()[0]
	if r.Header.Get(api.ExecHandoffHeader) != "" || r.Header.Get(api.AsHeader) != "bob" || r.TLS == nil || len(r.TLS.PeerCertificates) != 1 {
		t.Errorf("the exec's upgrade request: handoff %q, as %q, TLS %v", r.Header.Get(api.ExecHandoffHeader), r.Header.Get(api.AsHeader), r.TLS != nil)
	}
}

// A port stream over TLS carries its bytes on the pinned connection.
func TestTLSPortStream(t *testing.T) {
	d := newTLSDaemon(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != api.PortUpgrade {
			http.Error(w, "no upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.PortUpgrade + "\r\n\r\n")
		_ = brw.Flush()
		line := make([]byte, 5)
		if _, err := io.ReadFull(brw, line); err == nil {
			_, _ = conn.Write([]byte(strings.ToUpper(string(line))))
		}
	}))
	c, err := NewWithOptions(Options{Host: d.srv.URL, Token: "hl_secret", TLS: &TLSOptions{Fingerprint: d.fingerprint}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.DialPort(context.Background(), "web", 80)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "HELLO" {
		t.Fatalf("port stream over TLS answered %q, %v", got, err)
	}
	if r := d.requests()[0]; r.Header.Get("Authorization") != "Bearer hl_secret" {
		t.Errorf("the port stream's request had Authorization %q", r.Header.Get("Authorization"))
	}
}

func TestProbeFingerprint(t *testing.T) {
	d := newTLSDaemon(t, versionHandler())
	got, err := ProbeFingerprint(context.Background(), d.srv.URL)
	if err != nil || got != d.fingerprint {
		t.Fatalf("ProbeFingerprint = %q, %v; want %q", got, err, d.fingerprint)
	}
	if _, err := ProbeFingerprint(context.Background(), "http://"+strings.TrimPrefix(d.srv.URL, "https://")); err == nil {
		t.Error("ProbeFingerprint of an http:// address succeeded")
	}
	// Nothing listens on port 1.
	var unreachable *UnreachableError
	if _, err := ProbeFingerprint(context.Background(), "https://127.0.0.1:1"); !errors.As(err, &unreachable) {
		t.Errorf("ProbeFingerprint of a closed port: %v, want an *UnreachableError", err)
	}
}

func TestNewWithOptionsRefusesBadTLS(t *testing.T) {
	for _, o := range []Options{
		{Host: "http://127.0.0.1:1", TLS: &TLSOptions{Fingerprint: "SHA256:x"}},
		{Host: "https://127.0.0.1:1", TLS: &TLSOptions{CertFile: "client.crt"}},
		{Host: "https://127.0.0.1:1", TLS: &TLSOptions{CertFile: "/nonexistent/c.crt", KeyFile: "/nonexistent/c.key"}},
		{Host: "https://127.0.0.1:1/v1"},
		{Host: "https://"},
	} {
		if _, err := NewWithOptions(o); err == nil {
			t.Errorf("NewWithOptions(%+v) succeeded", o)
		}
	}
}
