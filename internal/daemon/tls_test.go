package daemon

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/users"
)

// logBuffer is a log's output, safe to read while servers write to it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newTestLog() (*slog.Logger, *logBuffer) {
	var b logBuffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// The first start makes a CA and a server certificate for the host's names and addresses;
// the next starts serve the same certificate, so the fingerprint clients pinned holds.
func TestServerCertMadeOnceAndReused(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"}
	log, _ := newTestLog()
	first, err := loadTLS(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	leaf := first.Cert.Leaf
	if first.Fingerprint != pki.Fingerprint(leaf.Raw) || !strings.HasPrefix(first.Fingerprint, "SHA256:") {
		t.Errorf("fingerprint %q is not the leaf's", first.Fingerprint)
	}
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("server key is a %T, want ECDSA P-256", leaf.PublicKey)
	}
	if life := time.Until(leaf.NotAfter); life < 9*365*24*time.Hour {
		t.Errorf("server certificate is good for %v only", life)
	}
	host := hostName()
	for _, name := range []string{strings.ToLower(host), "localhost"} {
		if !slices.Contains(leaf.DNSNames, name) {
			t.Errorf("certificate names %q, not %q", leaf.DNSNames, name)
		}
	}
	for _, ip := range []string{"127.0.0.1", "::1"} {
		if !slices.ContainsFunc(leaf.IPAddresses, net.ParseIP(ip).Equal) {
			t.Errorf("certificate has addresses %v, not %s", leaf.IPAddresses, ip)
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !slices.ContainsFunc(leaf.IPAddresses, n.IP.Equal) {
				t.Errorf("certificate lacks the interface address %s", n.IP)
			}
		}
	}
	// Signed by the daemon's own CA, for a server, verifiable by name and by address.
	for _, name := range []string{"localhost", "127.0.0.1", host} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: first.CA.Pool(), DNSName: name}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	dir := filepath.Join(cfg.DataDir, TLSDir)
	for _, f := range []string{ServerCertFile, ServerKeyFile, pki.CAKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %04o, want 0600", f, st.Mode().Perm())
		}
	}

	again, err := loadTLS(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fingerprint != first.Fingerprint || !again.CA.Cert.Equal(first.CA.Cert) {
		t.Errorf("a restart serves %s (CA %s), the first start %s (CA %s)", again.Fingerprint, again.CA.Cert.Subject, first.Fingerprint, first.CA.Cert.Subject)
	}
}

// A --tls-san the kept certificate lacks makes a new one (with a warning naming the old
// fingerprint); the same values at the next start, or fewer, keep it.
func TestServerCertReissuedForNewSAN(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"}
	log, logs := newTestLog()
	first, err := loadTLS(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLSSANs = []string{"sandboxd.example.test", "192.0.2.10"}
	second, err := loadTLS(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if second.Fingerprint == first.Fingerprint {
		t.Fatal("a new --tls-san kept the old certificate")
	}
	leaf := second.Cert.Leaf
	if !slices.Contains(leaf.DNSNames, "sandboxd.example.test") || !slices.ContainsFunc(leaf.IPAddresses, net.ParseIP("192.0.2.10").Equal) {
		t.Errorf("new certificate names %v %v", leaf.DNSNames, leaf.IPAddresses)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: second.CA.Pool(), DNSName: "sandboxd.example.test"}); err != nil {
		t.Error(err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "must trust the new one") ||
		!strings.Contains(l, "old_fingerprint="+first.Fingerprint) || !strings.Contains(l, "missing=sandboxd.example.test,192.0.2.10") {
		t.Errorf("no warning about the new certificate:\n%s", l)
	}

	for _, sans := range [][]string{cfg.TLSSANs, {"192.0.2.10"}, nil} {
		cfg.TLSSANs = sans
		again, err := loadTLS(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		if again.Fingerprint != second.Fingerprint {
			t.Errorf("--tls-san %q made a new certificate; the kept one names them all", sans)
		}
	}
}

// What is kept in the tls directory and does not load is said, never replaced: a new
// certificate makes every client trust again, which is the operator's call.
func TestServerCertBrokenIsRefused(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"}
	log, _ := newTestLog()
	if _, err := loadTLS(cfg, log); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.DataDir, TLSDir)
	keyPath := filepath.Join(dir, ServerKeyFile)
	key, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(keyPath)
	if _, err := loadTLS(cfg, log); err == nil || !strings.Contains(err.Error(), "holds half of the TLS listener's certificate") || !strings.Contains(err.Error(), "move") {
		t.Errorf("a certificate without its key: %v", err)
	}
	other, _, err := pki.NewKeyAndCSR("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTLS(cfg, log); err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
		t.Errorf("a certificate with another key: %v", err)
	}
	if err := os.WriteFile(keyPath, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTLS(cfg, log); err != nil {
		t.Errorf("the pair restored: %v", err)
	}
}

// Without --listen the CA is made all the same (it signs users' certificates), and no server
// certificate.
func TestCAWithoutListener(t *testing.T) {
	cfg := Config{DataDir: t.TempDir()}
	log, _ := newTestLog()
	got, err := loadTLS(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if got.CA == nil || got.Fingerprint != "" {
		t.Errorf("CA %v, fingerprint %q", got.CA, got.Fingerprint)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, TLSDir, ServerCertFile)); !os.IsNotExist(err) {
		t.Errorf("a server certificate without --listen: %v", err)
	}
}

// writeCert writes a certificate for tmpl signed by ca (self-signed when nil) and its key to
// dir, and returns their paths.
func writeCert(t *testing.T, dir, name string, tmpl *x509.Certificate, ca *pki.CA) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var der []byte
	if ca != nil {
		der, err = ca.Sign(tmpl, key.Public(), time.Hour)
	} else {
		tmpl.SerialNumber = randomSerial(t)
		der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	}
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func randomSerial(t *testing.T) *big.Int {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return new(big.Int).SetBytes(b)
}

// An operator's certificate is checked at start: given whole, a pair, current, for a server,
// and only with --listen; a good one is served, its fingerprint the one clients pin, and the
// daemon's CA is made all the same.
func TestOperatorCert(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	good, goodKey := writeCert(t, dir, "good", &x509.Certificate{
		Subject: pkix.Name{CommonName: "sandboxd.example.test"}, DNSNames: []string{"sandboxd.example.test"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, nil)
	expired, expiredKey := writeCert(t, dir, "expired", &x509.Certificate{
		Subject: pkix.Name{CommonName: "old"}, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour),
	}, nil)
	client, clientKey := writeCert(t, dir, "client", &x509.Certificate{
		Subject: pkix.Name{CommonName: "a client"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, nil)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for accepted, else part of the error
	}{
		{"good", Config{Listen: "127.0.0.1:0", TLSCertFile: good, TLSKeyFile: goodKey}, ""},
		{"neither", Config{Listen: "127.0.0.1:0"}, ""},
		{"cert alone", Config{Listen: "127.0.0.1:0", TLSCertFile: good}, "--tls-cert and --tls-key go together"},
		{"key alone", Config{Listen: "127.0.0.1:0", TLSKeyFile: goodKey}, "--tls-cert and --tls-key go together"},
		{"no listener", Config{TLSCertFile: good, TLSKeyFile: goodKey}, "--tls-cert without --listen"},
		{"with a SAN", Config{Listen: "127.0.0.1:0", TLSCertFile: good, TLSKeyFile: goodKey, TLSSANs: []string{"x.example.test"}}, "--tls-san with --tls-cert"},
		{"missing file", Config{Listen: "127.0.0.1:0", TLSCertFile: filepath.Join(dir, "nope.crt"), TLSKeyFile: goodKey}, "invalid --tls-cert: open "},
		{"missing key", Config{Listen: "127.0.0.1:0", TLSCertFile: good, TLSKeyFile: filepath.Join(dir, "nope.key")}, "invalid --tls-key: open "},
		{"other key", Config{Listen: "127.0.0.1:0", TLSCertFile: good, TLSKeyFile: expiredKey}, "private key does not match public key"},
		{"key as cert", Config{Listen: "127.0.0.1:0", TLSCertFile: goodKey, TLSKeyFile: goodKey}, "invalid --tls-cert " + goodKey + " with --tls-key"},
		{"expired", Config{Listen: "127.0.0.1:0", TLSCertFile: expired, TLSKeyFile: expiredKey}, "it expired on"},
		{"client's", Config{Listen: "127.0.0.1:0", TLSCertFile: client, TLSKeyFile: clientKey}, "not for a TLS server"},
		{"fronts without a listener", Config{FrontCAFile: good}, "--front-ca without --listen"},
	} {
		err := checkTLSFlags(tc.cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}

	// --front-ca takes CA certificates only, and at least one.
	for _, tc := range []struct{ file, want string }{
		{good, "is not a CA certificate"},
		{goodKey, "no PEM certificate in it"},
		{filepath.Join(dir, "nope.pem"), "--front-ca: open "},
	} {
		if _, err := loadFrontCAs(tc.file); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--front-ca %s: %v, want an error saying %q", tc.file, err, tc.want)
		}
	}

	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", TLSCertFile: good, TLSKeyFile: goodKey}
	log, _ := newTestLog()
	got, err := loadTLS(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, _ := os.ReadFile(good)
	leaf, _ := pki.ParseCertificate(pemBytes)
	if got.Fingerprint != pki.Fingerprint(leaf.Raw) {
		t.Errorf("fingerprint %s, the operator's certificate's is %s", got.Fingerprint, pki.Fingerprint(leaf.Raw))
	}
	if got.CA == nil {
		t.Error("no CA with an operator's certificate")
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, TLSDir, ServerCertFile)); !os.IsNotExist(err) {
		t.Errorf("sandboxd made a certificate of its own besides the operator's: %v", err)
	}
}

// testAPI serves the daemon's API listeners (the unix socket, --listen over TLS, and
// --insecure-listen) with handler until the test ends, and returns the daemon.
func testAPI(t *testing.T, insecure bool, handler http.Handler) (*Daemon, []apiServer, *logBuffer) {
	t.Helper()
	dir := t.TempDir()
	log, logs := newTestLog()
	cfg := Config{DataDir: dir, Socket: filepath.Join(dir, "api.sock"), Listen: "127.0.0.1:0"}
	if insecure {
		cfg.InsecureListen = "127.0.0.1:0"
	}
	d := &Daemon{cfg: cfg, log: log}
	var err error
	if d.tls, err = loadTLS(cfg, log); err != nil {
		t.Fatal(err)
	}
	// The TCP listeners authenticate: an admin's API token for get, from a real store.
	st, err := store.Open(filepath.Join(dir, store.FileState))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if d.users, err = users.Open(st.Owned("internal/users")); err != nil {
		t.Fatal(err)
	}
	d.auth = newAuthenticator(d.users, log)
	tok, err := d.users.CreateToken(identity.LocalAdmin, "tls-test", 0)
	if err != nil {
		t.Fatal(err)
	}
	testToken = tok.Value
	apis, err := d.listenAPI(handler)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range apis {
		a.logServing(log)
		go a.srv.Serve(a.ln)
		t.Cleanup(func() { a.srv.Close() })
	}
	return d, apis, logs
}

func apiAddr(apis []apiServer, kind apiListenerKind) string {
	for _, a := range apis {
		if a.kind == kind {
			return a.ln.Addr().String()
		}
	}
	return ""
}

// peerHandler answers with the TLS version and the verified client certificate's name.
var peerHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.TLS == nil:
		fmt.Fprint(w, "plain")
	case len(r.TLS.VerifiedChains) > 0:
		fmt.Fprintf(w, "%s client=%s", tls.VersionName(r.TLS.Version), r.TLS.VerifiedChains[0][0].Subject.CommonName)
	default:
		fmt.Fprint(w, tls.VersionName(r.TLS.Version))
	}
})

// testToken is the API token testAPI made, which get sends.
var testToken string

func get(t *testing.T, c *http.Client, url string) (string, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b), err
}

func tlsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

// The TLS listener serves TLS 1.3 (1.2 at the least) with the certificate whose fingerprint
// the daemon reports, takes a client certificate of its own CA and hands it to the handlers
// verified, and refuses another CA's at the handshake.
func TestTLSListener(t *testing.T) {
	d, apis, _ := testAPI(t, true, peerHandler)
	url := "https://" + apiAddr(apis, apiTLS) + "/v1/version"

	// A client that trusts the daemon's CA, as curl --cacert does.
	var seen string
	roots := &tls.Config{RootCAs: d.tls.CA.Pool(), VerifyConnection: func(cs tls.ConnectionState) error {
		seen = pki.Fingerprint(cs.PeerCertificates[0].Raw)
		return nil
	}}
	got, err := get(t, tlsClient(roots), url)
	if err != nil || got != "200 TLS 1.3" {
		t.Fatalf("GET: %q, %v", got, err)
	}
	if seen != d.tls.Fingerprint {
		t.Errorf("served certificate %s, the daemon reports %s", seen, d.tls.Fingerprint)
	}
	// By the host's name too: the certificate names it.
	byName := roots.Clone()
	byName.ServerName = hostName()
	if got, err := get(t, tlsClient(byName), url); err != nil || got != "200 TLS 1.3" {
		t.Errorf("GET as %s: %q, %v", hostName(), got, err)
	}

	tls12 := roots.Clone()
	tls12.MaxVersion = tls.VersionTLS12
	if got, err := get(t, tlsClient(tls12), url); err != nil || got != "200 TLS 1.2" {
		t.Errorf("GET with TLS 1.2: %q, %v", got, err)
	}
	tls11 := roots.Clone()
	tls11.MinVersion, tls11.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if got, err := get(t, tlsClient(tls11), url); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("GET with TLS 1.1: %q, %v; want a refused handshake", got, err)
	}

	// A user's certificate, from the daemon's CA through the trust exchange.
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("ignored")
	if err != nil {
		t.Fatal(err)
	}
	created, err := d.users.Add("alice", users.AddOptions{TrustTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ans, err := d.users.Exchange(created.TrustToken, func(user string) (*x509.Certificate, error) {
		return d.tls.CA.SignClient(csrPEM, user, time.Hour)
	})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair([]byte(ans.Certificate), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	user := roots.Clone()
	user.Certificates = []tls.Certificate{pair}
	if got, err := get(t, tlsClient(user), url); err != nil || got != "200 TLS 1.3 client=alice" {
		t.Errorf("GET with alice's certificate: %q, %v", got, err)
	}

	// Another daemon's CA signs a certificate for the same name: refused before any request.
	other, err := pki.LoadOrCreateCA(t.TempDir(), "another sandboxd")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.SignClient(csrPEM, "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair.Certificate = [][]byte{forged.Raw}
	pair.Leaf = forged
	stranger := roots.Clone()
	// Sent whatever CAs the server names (Go's client would otherwise send none).
	stranger.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	if got, err := get(t, tlsClient(stranger), url); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET with another CA's certificate: %q, %v; want a refused handshake", got, err)
	}

	// --insecure-listen: plain HTTP, with the token.
	if got, err := get(t, http.DefaultClient, "http://"+apiAddr(apis, apiInsecure)+"/v1/version"); err != nil || got != "200 plain" {
		t.Errorf("GET on --insecure-listen: %q, %v", got, err)
	}
}

// Plain HTTP sent to the TLS port gets a 400 that says so, and the daemon logs one line.
func TestPlainHTTPToTLSPort(t *testing.T) {
	_, apis, logs := testAPI(t, false, peerHandler)
	addr := apiAddr(apis, apiTLS)
	resp, err := http.Get("http://" + addr + "/v1/version")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Client sent an HTTP request to an HTTPS server") {
		t.Errorf("plain HTTP to the TLS port: %d %q", resp.StatusCode, body)
	}
	// The server logs after it answered: wait for the line, then close the servers so that
	// nothing else could come.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "HTTP request to an HTTPS server") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, a := range apis {
		a.srv.Close()
	}
	var warns []string
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "level=INFO") {
			warns = append(warns, sc.Text())
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "level=WARN") || !strings.Contains(warns[0], "client sent an HTTP request to an HTTPS server") {
		t.Errorf("log lines beyond INFO: %q, want one WARN", warns)
	}
}

// The daemon logs where it serves: with the fingerprint on the TLS listener, and a warning at
// every start on plain HTTP.
func TestServingLogged(t *testing.T) {
	d, apis, logs := testAPI(t, true, peerHandler)
	l := logs.String()
	if want := fmt.Sprintf(`level=INFO msg="serving API over TLS" addr=%s fingerprint=%s`, apiAddr(apis, apiTLS), d.tls.Fingerprint); !strings.Contains(l, want) {
		t.Errorf("log lacks %q:\n%s", want, l)
	}
	if want := "level=WARN msg=\"serving API over plain HTTP (--insecure-listen): anyone on the path reads every credential and every byte of every exec"; !strings.Contains(l, want) {
		t.Errorf("log lacks %q:\n%s", want, l)
	}
}

// The TLS listener's connections are the limiter's to track: busy while a request is served,
// idle between requests, as on the other listeners.
func TestTLSConnectionsTracked(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"}
	log, _ := newTestLog()
	d := &Daemon{cfg: cfg, log: log}
	var err error
	if d.tls, err = loadTLS(cfg, log); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := newConnLimiter(ln, 8)
	idle := func() int {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return lim.idle.Len()
	}
	a := d.newAPIServer(apiTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, idle())
	}), lim)
	go a.srv.Serve(a.ln)
	defer a.srv.Close()
	c := tlsClient(&tls.Config{RootCAs: d.tls.CA.Pool(), ServerName: "localhost"})
	got, err := get(t, c, "https://"+ln.Addr().String()+"/")
	if err != nil || got != "200 0" {
		t.Errorf("idle connections while serving the only one: %q, %v; want none", got, err)
	}
}

// Where a remote client reaches the SSH endpoint: --ssh-advertise, else --ssh-listen's host with
// the port it got, the host's name for an address meaning every interface.
func TestSSHEndpoint(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4zero, Port: 40022}
	for _, tc := range []struct{ advertise, listen, want string }{
		{"ssh.example.test:22", "0.0.0.0:2222", "ssh.example.test:22"},
		{"", "0.0.0.0:0", "box.example.test:40022"},
		{"", "[::]:2222", "box.example.test:40022"},
		{"", "127.0.0.1:0", "127.0.0.1:40022"},
		{"", "[::1]:0", "[::1]:40022"},
		{"", "localhost:2222", "localhost:40022"},
	} {
		if got := sshEndpoint(tc.advertise, tc.listen, addr, "box.example.test"); got != tc.want {
			t.Errorf("sshEndpoint(%q, %q) = %q, want %q", tc.advertise, tc.listen, got, tc.want)
		}
	}
}
