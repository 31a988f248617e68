package daemon

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/auditlog"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/logins"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/secrets"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/users"
	"github.com/hiloop/hiloop/pkg/api"
)

// tlsAPI is the daemon's API on a real TLS listener on loopback, as Serve makes it: the real
// routes and authenticator, a users store and audit log in a real bbolt file, the daemon's own
// CA, plus a test route that hijacks its connection and echoes lines, as a stream does.
type tlsAPI struct {
	d      *Daemon
	addr   string
	roots  *x509.CertPool
	logBuf *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startTLSAPI starts the API; with a front CA, as a cluster's node agent started with
// --front-ca.
func startTLSAPI(t *testing.T, fronts ...*pki.CA) *tlsAPI {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, store.FileState))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logBuf := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, nil))
	d := &Daemon{log: log, store: st}
	if d.users, err = users.Open(st.Owned("internal/users")); err != nil {
		t.Fatal(err)
	}
	// A user's name is checked against what the namespace still holds (namespaceEmpty).
	if d.secrets, err = secrets.Open(st.Owned("internal/secrets"), filepath.Join(dir, "master.key")); err != nil {
		t.Fatal(err)
	}
	if d.logins, err = logins.Open(st.Owned("internal/logins"), d.secrets); err != nil {
		t.Fatal(err)
	}
	if d.audit, err = auditlog.Open(st.Owned("internal/auditlog")); err != nil {
		t.Fatal(err)
	}
	if d.tls, err = loadTLS(Config{DataDir: dir}, log); err != nil { // the CA alone: no listener
		t.Fatal(err)
	}
	for _, ca := range fronts {
		d.tls.frontCerts = append(d.tls.frontCerts, ca.Cert)
		d.tls.Fronts = ca.Pool()
	}
	d.auth = newAuthenticator(d.users, log)
	d.auth.fronts = d.tls.Fronts
	routes := append(d.routes(), route{method: "GET", pattern: "/test/stream", handle: echoStream})
	srv := &http.Server{Handler: withVersion("test", newMux(routes, newIdempotency(st, log), log, d.auditAdd))}
	d.auth.guard(srv)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := d.tls.CA.Sign(&x509.Certificate{
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, key.Public(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLSConfig = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    d.tls.clientCAs(),
		MinVersion:   tls.VersionTLS12,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return &tlsAPI{d: d, addr: ln.Addr().String(), roots: d.tls.CA.Pool(), logBuf: logBuf}
}

// echoStream hijacks the connection and echoes lines until the client goes, as exec and port
// streams hold theirs.
func echoStream(w http.ResponseWriter, r *http.Request) error {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	buf.Flush()
	for {
		line, err := buf.ReadString('\n')
		if err != nil {
			return nil
		}
		buf.WriteString(line)
		if buf.Flush() != nil {
			return nil
		}
	}
}

// caller is one client of the API: a client certificate or a bearer token, from a local
// address.
type apiCaller struct {
	api   *tlsAPI
	cert  *tls.Certificate
	token string
	from  string // local IP to dial from; "" for any
}

func (c apiCaller) tlsConfig() *tls.Config {
	cfg := &tls.Config{RootCAs: c.api.roots, ServerName: "127.0.0.1"}
	if c.cert != nil {
		// Sent whatever CAs the server names, as a client that does not know better would.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.cert, nil }
	}
	return cfg
}

func (c apiCaller) client() *http.Client {
	dialer := &net.Dialer{}
	if c.from != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c.from)}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: c.tlsConfig(), DialContext: dialer.DialContext}}
}

func (c apiCaller) do(t *testing.T, method, path string, in, out any, headers ...string) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "https://"+c.api.addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	hdr := resp.Header.Clone()
	if resp.Close {
		hdr.Set("Connection", "close")
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode, hdr, string(b)
}

// enroll makes user and trades its trust token for a certificate through POST /v1/trust,
// which takes no credential.
func (a *tlsAPI) enroll(t *testing.T, user string, admin bool) apiCaller {
	t.Helper()
	created, err := a.d.users.Add(user, users.AddOptions{Admin: admin})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("laptop")
	if err != nil {
		t.Fatal(err)
	}
	var ans api.TrustAnswer
	if code, _, body := (apiCaller{api: a}).do(t, "POST", "/v1/trust", api.TrustPost{Token: created.TrustToken, CSR: string(csrPEM)}, &ans); code != http.StatusOK {
		t.Fatalf("trust exchange: %d %s", code, body)
	}
	cert, err := tls.X509KeyPair([]byte(ans.Certificate), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return apiCaller{api: a, cert: &cert}
}

func (a *tlsAPI) token(t *testing.T, user, name string) apiCaller {
	t.Helper()
	tok, err := a.d.users.CreateToken(user, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return apiCaller{api: a, token: tok.Value}
}

func wantError(t *testing.T, code int, body string, status int, errCode api.ErrorCode) {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal([]byte(body), &eb); err != nil || code != status || eb.Error == nil || eb.Error.Code != errCode {
		t.Fatalf("answer %d %s, want %d %s", code, body, status, errCode)
	}
}

func TestAuthenticationOnTLS(t *testing.T) {
	a := startTLSAPI(t)
	alice := a.enroll(t, "alice", false)
	var who api.WhoAmI
	if code, _, body := alice.do(t, "GET", "/v1/whoami", nil, &who); code != 200 || who != (api.WhoAmI{User: "alice", Via: "certificate"}) {
		t.Fatalf("alice's whoami: %d %s", code, body)
	}
	ci := a.token(t, "alice", "ci")
	if code, _, body := ci.do(t, "GET", "/v1/whoami", nil, &who); code != 200 || who != (api.WhoAmI{User: "alice", Via: "token", Token: "ci"}) {
		t.Fatalf("alice's token's whoami: %d %s", code, body)
	}

	// Nothing, a wrong token, a certificate the CA signed that the daemon never issued (its
	// record is not there): the same refusal, and the connection closed.
	rogue := forgedCaller(t, a)
	for name, c := range map[string]apiCaller{
		"nothing":      {api: a},
		"wrong token":  {api: a, token: "hl_" + strings.Repeat("a", 64)},
		"not a token":  {api: a, token: "s3cret"},
		"unissued crt": rogue,
	} {
		code, hdr, body := c.do(t, "GET", "/v1/whoami", nil, nil)
		wantError(t, code, body, 401, api.CodeUnauthorized)
		if !strings.Contains(body, "hiloop remote add") || hdr.Get("Connection") != "close" {
			t.Errorf("%s: %s (Connection: %q)", name, body, hdr.Get("Connection"))
		}
	}

	// A certificate of another CA does not get through the handshake.
	other, err := pki.LoadOrCreateCA(t.TempDir(), "other")
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, csrPEM, _ := pki.NewKeyAndCSR("x")
	cert, err := other.SignClient(csrPEM, "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, _ := tls.X509KeyPair(pemOf(cert.Raw), keyPEM)
	if _, err := (apiCaller{api: a, cert: &pair}).client().Get("https://" + a.addr + "/v1/whoami"); err == nil {
		t.Error("a certificate of another CA was accepted")
	}

	// Users are admins' business: a non-admin is forbidden, and cannot act as another.
	code, _, body := alice.do(t, "GET", "/v1/users", nil, nil)
	wantError(t, code, body, 403, api.CodeForbidden)
	code, _, body = alice.do(t, "GET", "/v1/whoami", nil, nil, api.AsHeader, "bob")
	wantError(t, code, body, 403, api.CodeForbidden)
	// Her own record and tokens are hers to see.
	var toks api.TokenList
	if code, _, body := alice.do(t, "GET", "/v1/users/alice/tokens", nil, &toks); code != 200 || len(toks.Tokens) != 1 {
		t.Fatalf("alice's tokens: %d %s", code, body)
	}
	code, _, body = alice.do(t, "GET", "/v1/users/admin/tokens", nil, nil)
	wantError(t, code, body, 403, api.CodeForbidden)

	root := a.token(t, identity.LocalAdmin, "laptop")
	var list api.UserList
	if code, _, body := root.do(t, "GET", "/v1/users", nil, &list); code != 200 || len(list.Users) != 2 {
		t.Fatalf("admin's user list: %d %s", code, body)
	}
}

// forgedCaller holds a certificate the daemon's own CA signed but the daemon never issued
// through a trust exchange.
func forgedCaller(t *testing.T, a *tlsAPI) apiCaller {
	keyPEM, csrPEM, _ := pki.NewKeyAndCSR("x")
	cert, err := a.d.tls.CA.SignClient(csrPEM, "admin", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(pemOf(cert.Raw), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return apiCaller{api: a, cert: &pair}
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestTrustExchangeOverTLS(t *testing.T) {
	a := startTLSAPI(t)
	created, err := a.d.users.Add("bob", users.AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	anon := apiCaller{api: a}
	code, _, body := anon.do(t, "POST", "/v1/trust", api.TrustPost{Token: created.TrustToken, CSR: "not a CSR"}, nil)
	wantError(t, code, body, 400, api.CodeBadRequest)
	_, csr, _ := pki.NewKeyAndCSR("laptop")
	if code, _, body := anon.do(t, "POST", "/v1/trust", api.TrustPost{Token: created.TrustToken, CSR: string(csr)}, nil); code != 200 {
		t.Fatalf("trust exchange after a bad CSR: %d %s", code, body)
	}
	used, _, usedBody := anon.do(t, "POST", "/v1/trust", api.TrustPost{Token: created.TrustToken, CSR: string(csr)}, nil)
	forged, _, forgedBody := anon.do(t, "POST", "/v1/trust", api.TrustPost{Token: "0123", CSR: string(csr)}, nil)
	wantError(t, used, usedBody, 401, api.CodeUnauthorized)
	if used != forged || usedBody != forgedBody {
		t.Errorf("a used and a forged trust token are told apart: %q vs %q", usedBody, forgedBody)
	}
	recs, err := a.d.audit.Since(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var issued, calls int
	for _, r := range recs {
		switch r.Action {
		case api.AuditCertificateIssued:
			issued++
			if r.User != "bob" || !strings.HasPrefix(r.Message, "SHA256:") {
				t.Errorf("issue record %+v", r)
			}
		case api.AuditAPICall:
			calls++
			if r.Route != "/v1/trust" || r.Method != "POST" || r.User != "" {
				t.Errorf("call record %+v", r)
			}
		}
	}
	if issued != 1 || calls != 4 {
		t.Errorf("%d issue records and %d call records, want 1 and 4: %+v", issued, calls, recs)
	}
}

func TestChangesAreAuditedWithTheirUser(t *testing.T) {
	a := startTLSAPI(t)
	root := a.token(t, identity.LocalAdmin, "laptop")
	var created api.UserCreated
	if code, _, body := root.do(t, "POST", "/v1/users", api.UsersPost{Name: "carol", TrustTokenTTL: "2h"}, &created); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	if d := time.Until(created.ExpiresAt); d > 2*time.Hour || d < time.Hour {
		t.Errorf("trust token expires in %s, want 2h", d)
	}
	var tok api.TokenCreated
	if code, _, body := root.do(t, "POST", "/v1/users/carol/tokens", api.TokensPost{Name: "ci", TTL: "30d"}, &tok, api.AsHeader, "carol"); code != 201 {
		t.Fatalf("token: %d %s", code, body)
	}
	code, _, body := root.do(t, "POST", "/v1/users", api.UsersPost{Name: "carol"}, nil)
	wantError(t, code, body, 409, api.CodeUserExists)
	root.do(t, "GET", "/v1/users", nil, nil)
	recs, err := a.d.audit.Since(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.AuditRecord{
		{Action: api.AuditAPICall, User: "admin", Method: "POST", Route: "/v1/users", Status: 201},
		{Action: api.AuditAPICall, User: "admin", As: "carol", Method: "POST", Route: "/v1/users/{user}/tokens", Resources: map[string]string{"user": "carol"}, Status: 201},
		{Action: api.AuditAPICall, User: "admin", Method: "POST", Route: "/v1/users", Status: 409},
	}
	if len(recs) != len(want) {
		t.Fatalf("records %+v, want %d", recs, len(want))
	}
	for i, r := range recs {
		r.Seq, r.Time = 0, time.Time{}
		if fmt.Sprint(r) != fmt.Sprint(want[i]) {
			t.Errorf("record %d = %+v, want %+v", i, r, want[i])
		}
		raw, _ := json.Marshal(r)
		if strings.Contains(string(raw), tok.Value) || strings.Contains(string(raw), created.TrustToken) {
			t.Errorf("record %d holds a credential: %s", i, raw)
		}
	}
}

func TestFailedAuthenticationsAreLimitedPerAddress(t *testing.T) {
	a := startTLSAPI(t)
	alice := a.enroll(t, "alice", false)
	good := a.token(t, "alice", "ci")
	bad := apiCaller{api: a, token: "hl_wrong", from: "127.0.0.1"}
	for i := range failBurst {
		code, _, body := bad.do(t, "GET", "/v1/whoami", nil, nil)
		if code != 401 {
			t.Fatalf("failure %d: %d %s", i+1, code, body)
		}
	}
	for range 5 {
		code, hdr, body := bad.do(t, "GET", "/v1/whoami", nil, nil)
		wantError(t, code, body, 429, api.CodeTooManyAttempts)
		if ra := hdr.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After %q", ra)
		}
	}
	// Over the limit, even a good token from the address waits: the limit is there so that
	// no token is tried.
	good.from = "127.0.0.1"
	code, _, body := good.do(t, "GET", "/v1/whoami", nil, nil)
	wantError(t, code, body, 429, api.CodeTooManyAttempts)
	// The trust exchange is held back the same.
	code, _, body = bad.do(t, "POST", "/v1/trust", api.TrustPost{Token: "x"}, nil)
	wantError(t, code, body, 429, api.CodeTooManyAttempts)
	// A client certificate was verified by the handshake, and passes.
	alice.from = "127.0.0.1"
	if code, _, body := alice.do(t, "GET", "/v1/whoami", nil, nil); code != 200 {
		t.Fatalf("certificate over the limit: %d %s", code, body)
	}
	// Another address is answered as ever.
	good.from = "127.0.0.2"
	if code, _, body := good.do(t, "GET", "/v1/whoami", nil, nil); code != 200 {
		t.Fatalf("another address: %d %s", code, body)
	}
	if n := strings.Count(a.logBuf.String(), "too many failed authentications"); n != 1 {
		t.Errorf("%d log lines for one address within a minute, want 1:\n%s", n, a.logBuf.String())
	}
}

func TestFailLimiterRefills(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newFailLimiter(slog.New(slog.DiscardHandler))
	l.now = func() time.Time { return now }
	addr := remoteAddr(&http.Request{RemoteAddr: "[2001:db8::1]:5"})
	for range failBurst {
		l.failed(addr)
	}
	if w := l.wait(addr); w != failEvery {
		t.Fatalf("wait after the burst = %s, want %s", w, failEvery)
	}
	// The same /64 is the same address.
	if w := l.wait(remoteAddr(&http.Request{RemoteAddr: "[2001:db8::2]:5"})); w == 0 {
		t.Error("another address of the /64 is not held back")
	}
	now = now.Add(failEvery)
	if w := l.wait(addr); w != 0 {
		t.Fatalf("wait after %s = %s, want none", failEvery, w)
	}
	l.failed(addr)
	if w := l.wait(addr); w == 0 {
		t.Error("one refill let two failures through")
	}
}

// A revoked token and a removed user lose their live connections: an idle keep-alive one and
// a hijacked stream.
func TestRevocationEndsLiveConnections(t *testing.T) {
	a := startTLSAPI(t)
	root := a.token(t, identity.LocalAdmin, "laptop")
	for _, tc := range []struct {
		name   string
		c      apiCaller
		revoke func()
	}{
		{"token", a.token(t, identity.LocalAdmin, "ci"), func() {
			if code, _, body := root.do(t, "DELETE", "/v1/users/admin/tokens/ci", nil, nil); code != 204 {
				t.Fatalf("revoke: %d %s", code, body)
			}
		}},
		{"user", a.enroll(t, "dave", false), func() {
			if code, _, body := root.do(t, "DELETE", "/v1/users/dave", nil, nil); code != 204 {
				t.Fatalf("remove: %d %s", code, body)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := tc.c.openStream(t)
			idle := tc.c.openIdle(t)
			if _, err := fmt.Fprintln(stream, "ping"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(stream)
			if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
				t.Fatalf("echo: %q %v", line, err)
			}
			tc.revoke()
			for name, r := range map[string]io.Reader{"stream": br, "idle": idle} {
				if _, err := io.ReadAll(r); err != nil && !isClosed(err) {
					t.Errorf("%s connection: %v", name, err)
				}
			}
			code, _, body := tc.c.do(t, "GET", "/v1/whoami", nil, nil)
			wantError(t, code, body, 401, api.CodeUnauthorized)
		})
	}
}

// A user who revokes the token they call with gets the answer, then loses the connection.
func TestRevokingOwnTokenIsAnswered(t *testing.T) {
	a := startTLSAPI(t)
	if _, err := a.d.users.Add("erin", users.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	ci := a.token(t, "erin", "ci")
	code, hdr, body := ci.do(t, "DELETE", "/v1/users/erin/tokens/ci", nil, nil)
	if code != 204 || hdr.Get("Connection") != "close" {
		t.Fatalf("revoking its own token: %d %s (Connection: %q)", code, body, hdr.Get("Connection"))
	}
	code, _, body = ci.do(t, "GET", "/v1/whoami", nil, nil)
	wantError(t, code, body, 401, api.CodeUnauthorized)
}

func isClosed(err error) bool {
	return strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "EOF")
}

// openStream dials, sends an upgrade to the echo stream and returns the connection after the
// 101; a read on it ends only when the daemon closes it (or at a generous deadline, failing).
func (c apiCaller) openStream(t *testing.T) net.Conn {
	t.Helper()
	conn := c.dial(t)
	fmt.Fprintf(conn, "GET /test/stream HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n%s\r\n", c.authHeader())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	return conn
}

// openIdle makes one request on a keep-alive connection and returns it idle.
func (c apiCaller) openIdle(t *testing.T) net.Conn {
	t.Helper()
	conn := c.dial(t)
	fmt.Fprintf(conn, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n%s\r\n", c.authHeader())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return conn
}

func (c apiCaller) dial(t *testing.T) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: c.tlsConfig()}).DialContext(ctx, "tcp", c.api.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A revocation that does not close the connection fails the test rather than hang it.
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn
}

func (c apiCaller) authHeader() string {
	if c.token == "" {
		return ""
	}
	return "Authorization: Bearer " + c.token + "\r\n"
}

// The limiter remembers a bounded number of addresses: a flood from many addresses forgets the
// ones back to a full allowance first, and never grows past the bound.
func TestFailLimiterIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newFailLimiter(slog.New(slog.DiscardHandler))
	l.now = func() time.Time { return now }
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	blocked := addr(0)
	for range failBurst {
		l.failed(blocked)
	}
	for i := 1; i <= failMaxAddrs+10; i++ {
		l.failed(addr(i))
	}
	if n := len(l.addrs); n > failMaxAddrs {
		t.Errorf("%d addresses remembered, bound %d", n, failMaxAddrs)
	}
	if l.wait(blocked) == 0 {
		t.Error("the address over its limit was forgotten before those with allowance left")
	}
}

// frontCaller is a cluster's front: a client certificate the front CA signed.
func frontCaller(t *testing.T, a *tlsAPI, ca *pki.CA) apiCaller {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := ca.Sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "hiloop-front"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return apiCaller{api: a, cert: &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}

func TestFrontActsAsTheUserItNames(t *testing.T) {
	frontCA, err := pki.LoadOrCreateCA(t.TempDir(), "front CA")
	if err != nil {
		t.Fatal(err)
	}
	a := startTLSAPI(t, frontCA)
	front := frontCaller(t, a, frontCA)

	// alice exists only in the cluster, not in this daemon's users.
	var who api.WhoAmI
	if code, _, body := front.do(t, "GET", "/v1/whoami", nil, &who, api.FrontUserHeader, "alice"); code != 200 || who != (api.WhoAmI{User: "alice", Via: "front"}) {
		t.Fatalf("whoami through a front as alice: %d %s", code, body)
	}
	if code, _, body := front.do(t, "GET", "/v1/whoami", nil, &who, api.FrontUserHeader, "ops", api.FrontAdminHeader, "true"); code != 200 || who != (api.WhoAmI{User: "ops", Admin: true, Via: "front"}) {
		t.Fatalf("whoami through a front as the admin ops: %d %s", code, body)
	}
	// A user the front names acts in their own namespace only: alice's list is not ops'.
	if code, _, body := front.do(t, "GET", "/v1/sandboxes?all_users=true", nil, nil, api.FrontUserHeader, "alice"); code != http.StatusForbidden {
		t.Fatalf("all_users through a front as alice: %d %s, want 403", code, body)
	}

	// A front that names no user, or an invalid one, is refused, not taken for anyone.
	for _, hdr := range [][]string{nil, {api.FrontUserHeader, "Alice!"}, {api.FrontUserHeader, "alice", api.FrontAdminHeader, "yes"}} {
		code, _, body := front.do(t, "GET", "/v1/whoami", nil, nil, hdr...)
		wantError(t, code, body, http.StatusUnauthorized, api.CodeUnauthorized)
	}

	// A user's own certificate with the front's headers is still that user: the headers count
	// from a front's certificate only.
	bob := a.enroll(t, "bob", false)
	if code, _, body := bob.do(t, "GET", "/v1/whoami", nil, &who, api.FrontUserHeader, "ops", api.FrontAdminHeader, "true"); code != 200 || who != (api.WhoAmI{User: "bob", Via: "certificate"}) {
		t.Fatalf("bob with a front's headers: %d %s", code, body)
	}
}

func TestFrontCertificateOfAnotherCAIsRefused(t *testing.T) {
	// A daemon with no --front-ca takes no front's certificate: the handshake fails.
	a := startTLSAPI(t)
	frontCA, err := pki.LoadOrCreateCA(t.TempDir(), "front CA")
	if err != nil {
		t.Fatal(err)
	}
	front := frontCaller(t, a, frontCA)
	req, _ := http.NewRequest("GET", "https://"+a.addr+"/v1/whoami", nil)
	req.Header.Set(api.FrontUserHeader, "admin")
	req.Header.Set(api.FrontAdminHeader, "true")
	resp, err := front.client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a front certificate of an unknown CA was answered %d", resp.StatusCode)
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("error %v does not say the certificate was refused", err)
	}
}
