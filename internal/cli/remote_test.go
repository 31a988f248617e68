package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/remotes"
	"github.com/hiloop/hiloop/pkg/api"
)

func init() {
	commandFlagCases = append(commandFlagCases, remoteFlagCases...)
}

var remoteFlagCases = []struct {
	path  string
	parse func(*Factory, []string) (string, any, error)
	cases []flagCase
}{
	{"hiloop remote add", parser(newCmdRemoteAdd), []flagCase{
		ok(&RemoteAddOptions{Name: "myhost", URL: "https://myhost.example:8443", TrustToken: "tok"}, "myhost", "https://myhost.example:8443", "--token", "tok"),
		ok(&RemoteAddOptions{Name: "myhost", URL: "https://myhost.example:443", APIToken: "hl_x", AcceptFingerprint: "SHA256:abc"},
			"myhost", "https://myhost.example/", "--api-token", "hl_x", "--accept-fingerprint", "SHA256:abc"),
		ok(&RemoteAddOptions{Name: "v6", URL: "https://[::1]:8443", TrustToken: "tok"}, "v6", "https://[::1]:8443", "--token", "tok"),
		refused(ExitUsage, "myhost", "https://myhost.example:8443"),
		refused(ExitUsage, "myhost", "https://myhost.example:8443", "--token", "t", "--api-token", "hl_x"),
		refused(ExitUsage, "local", "https://myhost.example:8443", "--token", "t"),
		refused(ExitUsage, "My_Host", "https://myhost.example:8443", "--token", "t"),
		refused(ExitUsage, "myhost", "http://myhost.example:8443", "--token", "t"),
		refused(ExitUsage, "myhost", "https://myhost.example:8443/v1", "--token", "t"),
		refused(ExitUsage, "myhost", "https://myhost.example:8443", "--token", "t", "--accept-fingerprint", "MD5:ab"),
		refused(ExitUsage, "myhost"),
	}},
	{"hiloop remote list", parser(newCmdRemoteList), []flagCase{
		ok(&RemoteListOptions{Output: "table"}),
		ok(&RemoteListOptions{Output: "json"}, "-o", "json"),
		refused(ExitUsage, "myhost"),
		refused(ExitUsage, "-o", "xml"),
	}},
	{"hiloop remote switch", parser(newCmdRemoteSwitch), []flagCase{
		ok(&RemoteSwitchOptions{Name: "local"}, "local"),
		refused(ExitUsage),
	}},
	{"hiloop remote rename", parser(newCmdRemoteRename), []flagCase{
		ok(&RemoteRenameOptions{Old: "a", New: "b"}, "a", "b"),
		refused(ExitUsage, "a", "local"),
		refused(ExitUsage, "a"),
	}},
	{"hiloop remote remove", parser(newCmdRemoteRemove), []flagCase{
		ok(&RemoteRemoveOptions{Name: "a"}, "a"),
		refused(ExitUsage),
	}},
}

// trustDaemon is a real HTTPS server on loopback that does what sandboxd's --listen does for a
// remote: POST /v1/trust signs a client certificate with a real pki.CA for a one-time trust
// token, and every other route authenticates the client certificate the CA signed or an API
// token.
type trustDaemon struct {
	srv  *httptest.Server
	ca   *pki.CA
	addr string // 127.0.0.1:port
	url  string // https://127.0.0.1:port
	cert atomic.Pointer[tls.Certificate]
	fp   atomic.Value // string: the fingerprint of cert

	mu     sync.Mutex
	tokens map[string]string // unused trust token → user
	as     []string          // Hiloop-As of each sandbox list
}

func newTrustDaemon(t *testing.T) *trustDaemon {
	t.Helper()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), "test CA")
	if err != nil {
		t.Fatal(err)
	}
	d := &trustDaemon{ca: ca, tokens: map[string]string{"tok-alice": "alice", "tok-carol": "carol"}}
	d.newServerCert(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A TLS listener of its own: httptest's StartTLS would put its own certificate first, and
	// GetCertificate (which lets a test replace the certificate) is asked only without one.
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(d.serve))
	d.srv.Listener = tls.NewListener(ln, &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return d.cert.Load(), nil },
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      ca.Pool(),
	})
	// A probe closes its connection after the handshake, which the server would log.
	d.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	d.srv.Start()
	t.Cleanup(d.srv.Close)
	d.addr = ln.Addr().String()
	d.url = "https://" + d.addr
	return d
}

// newServerCert gives the server a new certificate, as a replaced server would have.
func (d *trustDaemon) newServerCert(t *testing.T) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := d.ca.Sign(&x509.Certificate{
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}, key.Public(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	d.cert.Store(&tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
	d.fp.Store(pki.Fingerprint(der))
}

func (d *trustDaemon) fingerprint() string { return d.fp.Load().(string) }

func (d *trustDaemon) tokenUnused(tok string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.tokens[tok]
	return ok
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeAPIError(w http.ResponseWriter, status int, code api.ErrorCode, msg string) {
	writeJSON(w, status, api.ErrorBody{Error: &api.Error{Code: code, Message: msg}})
}

func (d *trustDaemon) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/trust" {
		var p api.TrustPost
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			writeAPIError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
			return
		}
		d.mu.Lock()
		user, ok := d.tokens[p.Token]
		delete(d.tokens, p.Token)
		d.mu.Unlock()
		if !ok {
			writeAPIError(w, http.StatusUnauthorized, api.CodeUnauthorized, "unknown, used or expired trust token: ask an admin for a new one (hiloop user add or hiloop user trust-token)")
			return
		}
		cert, err := d.ca.SignClient([]byte(p.CSR), user, 24*time.Hour)
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, api.CodeInvalidArgument, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, api.TrustAnswer{User: user,
			Certificate: string(pemEncode(cert.Raw)), ExpiresAt: cert.NotAfter})
		return
	}
	who, ok := d.authenticate(r)
	if !ok {
		writeAPIError(w, http.StatusUnauthorized, api.CodeUnauthorized, "no client certificate or API token this daemon knows")
		return
	}
	switch r.URL.Path {
	case "/v1/whoami":
		writeJSON(w, http.StatusOK, who)
	case "/v1/version":
		writeJSON(w, http.StatusOK, api.VersionInfo{Version: "test", TLSFingerprint: d.fingerprint()})
	case "/v1/sandboxes":
		d.mu.Lock()
		d.as = append(d.as, r.Header.Get(api.AsHeader))
		d.mu.Unlock()
		writeJSON(w, http.StatusOK, api.SandboxList{Sandboxes: []api.Sandbox{{Name: who.User + "-box", State: api.StateRunning}}})
	default:
		writeAPIError(w, http.StatusNotFound, api.CodeNotFound, "no route")
	}
}

// authenticate takes a client certificate the CA signed (the TLS handshake verified it), or
// the API token hl_ci.
func (d *trustDaemon) authenticate(r *http.Request) (api.WhoAmI, bool) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return api.WhoAmI{User: r.TLS.VerifiedChains[0][0].Subject.CommonName, Via: "certificate"}, true
	}
	if r.Header.Get("Authorization") == "Bearer hl_ci" {
		return api.WhoAmI{User: "bot", Via: "token", Token: "ci"}, true
	}
	return api.WhoAmI{}, false
}

func pemEncode(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// regexpLine says whether a line of s matches re.
func regexpLine(s, re string) bool {
	return regexp.MustCompile("(?m)" + re).MatchString(s)
}

// remoteRun runs hiloop with args, its remotes in dir, and returns the exit code, stdout and
// stderr. Host is empty, as with neither --host nor HILOOP_HOST: the remotes decide.
func remoteRun(t *testing.T, dir string, stdin string, tty bool, args ...string) (int, string, string) {
	t.Helper()
	ios, in, out, errOut := iostreams.Test()
	in.WriteString(stdin)
	ios.SetStdinTTY(tty)
	f := &Factory{IO: ios, ConfigDir: dir}
	code := Run(f, args)
	return code, out.String(), errOut.String()
}

func TestRemoteAddTradesTrustToken(t *testing.T) {
	d := newTrustDaemon(t)
	dir := t.TempDir()
	code, out, errOut := remoteRun(t, dir, "", false, "remote", "add", "myhost", d.url, "--token", "tok-alice", "--accept-fingerprint", d.fingerprint())
	if code != 0 || out != "Added remote myhost: you are alice on "+d.addr+"\n" {
		t.Fatalf("remote add: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if d.tokenUnused("tok-alice") {
		t.Error("the trust token is still unused")
	}
	cfg, err := remotes.Open(dir).Load()
	if err != nil {
		t.Fatal(err)
	}
	r, ok := cfg.Get("myhost")
	if !ok || r.URL != d.url || r.Fingerprint != d.fingerprint() || r.User != "alice" || r.Auth != remotes.AuthCertificate {
		t.Fatalf("stored %+v", r)
	}
	certFile, keyFile := remotes.Open(dir).CertFiles(r)
	if runtime.GOOS != "windows" {
		for _, p := range []string{keyFile, filepath.Join(dir, remotes.ConfigFile)} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, %v", p, fi.Mode(), err)
			}
		}
	}
	certPEM, _ := os.ReadFile(certFile)
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil || cert.Subject.CommonName != "alice" {
		t.Fatalf("stored certificate: %v, %v", cert, err)
	}

	// The remote's certificate authenticates every command; --as goes with it.
	code, out, errOut = remoteRun(t, dir, "", false, "--remote", "myhost", "--as", "bob", "sandbox", "list", "-o", "json")
	if code != 0 || !strings.Contains(out, `"alice-box"`) {
		t.Fatalf("sandbox list over the remote: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if len(d.as) != 1 || d.as[0] != "bob" {
		t.Errorf("Hiloop-As sent: %q", d.as)
	}

	// A used token is refused by the daemon, and nothing is stored.
	code, _, errOut = remoteRun(t, dir, "", false, "remote", "add", "again", d.url, "--token", "tok-alice", "--accept-fingerprint", d.fingerprint())
	if code != api.ExitCodeUnauthorized || !strings.Contains(errOut, "trust token") {
		t.Errorf("a used trust token: exit %d, stderr %q", code, errOut)
	}
	if cfg, _ := remotes.Open(dir).Load(); len(cfg.Remotes) != 1 {
		t.Errorf("a refused add stored a remote: %+v", cfg.Remotes)
	}
	// A name taken is refused before the token is spent.
	code, _, errOut = remoteRun(t, dir, "", false, "remote", "add", "myhost", d.url, "--token", "tok-carol", "--accept-fingerprint", d.fingerprint())
	if code != ExitConflict || !d.tokenUnused("tok-carol") {
		t.Errorf("adding a taken name: exit %d, stderr %q, token unused %v", code, errOut, d.tokenUnused("tok-carol"))
	}
}

func TestRemoteAddAsksOnATerminal(t *testing.T) {
	d := newTrustDaemon(t)
	dir := t.TempDir()
	// No: nothing is stored and the token is not spent.
	code, _, errOut := remoteRun(t, dir, "n\n", true, "remote", "add", "myhost", d.url, "--token", "tok-alice")
	if code != ExitError || !strings.Contains(errOut, d.fingerprint()) || !strings.Contains(errOut, "[y/N]") || !strings.Contains(errOut, "not trusted") {
		t.Fatalf("answering no: exit %d, stderr %q", code, errOut)
	}
	if !d.tokenUnused("tok-alice") {
		t.Error("a refused fingerprint spent the trust token")
	}
	code, out, errOut := remoteRun(t, dir, "y\n", true, "remote", "add", "myhost", d.url, "--token", "tok-alice")
	if code != 0 || !strings.HasPrefix(out, "Added remote myhost: you are alice") {
		t.Fatalf("answering yes: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestRemoteAddRefusesUncheckedFingerprints(t *testing.T) {
	d := newTrustDaemon(t)
	dir := t.TempDir()
	code, _, errOut := remoteRun(t, dir, "y\n", false, "remote", "add", "myhost", d.url, "--token", "tok-alice")
	if code != ExitUsage || !strings.Contains(errOut, "presents "+d.fingerprint()) || !strings.Contains(errOut, "--accept-fingerprint") {
		t.Errorf("off a terminal without --accept-fingerprint: exit %d, stderr %q", code, errOut)
	}
	other := "SHA256:" + strings.Repeat("B", 43)
	code, _, errOut = remoteRun(t, dir, "", false, "remote", "add", "myhost", d.url, "--token", "tok-alice", "--accept-fingerprint", other)
	want := "hiloop: the server at " + d.addr + " presents " + d.fingerprint() + ", not " + other + " as --accept-fingerprint says: nothing is stored; check the fingerprint on the server (hiloop system info there)\n"
	if code != ExitError || errOut != want {
		t.Errorf("a wrong --accept-fingerprint: exit %d, stderr\n%q\nwant\n%q", code, errOut, want)
	}
	if !d.tokenUnused("tok-alice") {
		t.Error("a refused fingerprint spent the trust token")
	}
	if _, err := os.Stat(filepath.Join(dir, remotes.ConfigFile)); !os.IsNotExist(err) {
		t.Errorf("a refused add wrote the config: %v", err)
	}
}

func TestRemoteAddAPIToken(t *testing.T) {
	d := newTrustDaemon(t)
	dir := t.TempDir()
	code, _, errOut := remoteRun(t, dir, "", false, "remote", "add", "ci", d.url, "--api-token", "hl_wrong", "--accept-fingerprint", d.fingerprint())
	if code != api.ExitCodeUnauthorized {
		t.Errorf("a wrong API token: exit %d, stderr %q", code, errOut)
	}
	if cfg, _ := remotes.Open(dir).Load(); len(cfg.Remotes) != 0 {
		t.Errorf("a wrong API token was stored: %+v", cfg.Remotes)
	}
	code, out, errOut := remoteRun(t, dir, "", false, "remote", "add", "ci", d.url, "--api-token", "hl_ci", "--accept-fingerprint", d.fingerprint())
	if code != 0 || out != "Added remote ci: you are bot on "+d.addr+"\n" {
		t.Fatalf("remote add --api-token: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = remoteRun(t, dir, "", false, "--remote", "ci", "sandbox", "list", "-o", "json")
	if code != 0 || !strings.Contains(out, `"bot-box"`) {
		t.Errorf("sandbox list with the API token: exit %d, %q", code, out)
	}
}

func TestRemoteListSwitchRenameRemove(t *testing.T) {
	d := newTrustDaemon(t)
	dir := t.TempDir()
	if code, _, errOut := remoteRun(t, dir, "", false, "remote", "add", "myhost", d.url, "--token", "tok-alice", "--accept-fingerprint", d.fingerprint()); code != 0 {
		t.Fatal(errOut)
	}
	// A remote whose server is gone.
	gone := newTrustDaemon(t)
	if code, _, errOut := remoteRun(t, dir, "", false, "remote", "add", "gone", gone.url, "--token", "tok-carol", "--accept-fingerprint", gone.fingerprint()); code != 0 {
		t.Fatal(errOut)
	}
	gone.srv.Close()

	code, out, errOut := remoteRun(t, dir, "", false, "--host", "unix:///nonexistent/s.sock", "remote", "list", "-o", "json")
	if code != 0 {
		t.Fatalf("remote list: exit %d, %s", code, errOut)
	}
	var list RemoteList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	status := map[string]RemoteItem{}
	for _, it := range list.Remotes {
		status[it.Name] = it
	}
	if it := status["local"]; !it.Current || it.Status != "unreachable" || it.URL != "unix:///nonexistent/s.sock" {
		t.Errorf("local: %+v", it)
	}
	if it := status["myhost"]; it.Current || it.Status != "ok" || it.User != "alice" || it.Fingerprint != d.fingerprint() {
		t.Errorf("myhost: %+v", it)
	}
	if it := status["gone"]; it.Status != "unreachable" {
		t.Errorf("gone: %+v", it)
	}
	if len(list.Remotes) != 3 || list.Remotes[0].Name != "local" {
		t.Errorf("the list: %+v", list.Remotes)
	}

	// Switched, myhost is what a command talks to without --remote.
	if code, out, _ := remoteRun(t, dir, "", false, "remote", "switch", "myhost"); code != 0 || out != "Remote myhost is current\n" {
		t.Fatalf("switch: %d %q", code, out)
	}
	if code, out, errOut := remoteRun(t, dir, "", false, "sandbox", "list", "-o", "json"); code != 0 || !strings.Contains(out, "alice-box") {
		t.Fatalf("sandbox list on the current remote: exit %d, %q %q", code, out, errOut)
	}
	_, out, _ = remoteRun(t, dir, "", false, "--host", "unix:///nonexistent/s.sock", "remote", "list")
	if !regexpLine(out, `^\*\s+myhost\s+`+regexp.QuoteMeta(d.url)+`\s+alice\s+`) {
		t.Errorf("the table does not mark myhost current:\n%s", out)
	}

	if code, out, _ := remoteRun(t, dir, "", false, "remote", "rename", "myhost", "box"); code != 0 || out != "Renamed remote myhost to box\n" {
		t.Fatalf("rename: %d %q", code, out)
	}
	if code, out, _ := remoteRun(t, dir, "", false, "sandbox", "list", "-o", "json"); code != 0 || !strings.Contains(out, "alice-box") {
		t.Fatalf("the renamed current remote: exit %d, %q", code, out)
	}
	if code, _, errOut := remoteRun(t, dir, "", false, "--remote", "myhost", "sandbox", "list"); code != ExitNotFound || !strings.Contains(errOut, "no remote named myhost") {
		t.Errorf("the old name: exit %d, %q", code, errOut)
	}
	if code, _, _ := remoteRun(t, dir, "", false, "remote", "switch", "nosuch"); code != ExitNotFound {
		t.Errorf("switch to a missing remote: exit %d", code)
	}
	if code, _, _ := remoteRun(t, dir, "", false, "remote", "rename", "box", "gone"); code != ExitConflict {
		t.Errorf("rename onto a taken name: exit %d", code)
	}

	cfg, _ := remotes.Open(dir).Load()
	box, _ := cfg.Get("box")
	certFile, _ := remotes.Open(dir).CertFiles(box)
	if code, out, _ := remoteRun(t, dir, "", false, "remote", "remove", "box"); code != 0 || out != "Removed remote box; local is current now\n" {
		t.Fatalf("remove: %d %q", code, out)
	}
	if _, err := os.Stat(filepath.Dir(certFile)); !os.IsNotExist(err) {
		t.Errorf("the removed remote's files: %v", err)
	}
	if cfg, _ := remotes.Open(dir).Load(); cfg.CurrentName() != remotes.Local || len(cfg.Remotes) != 1 {
		t.Errorf("after remove: %+v", cfg)
	}
	if code, _, _ := remoteRun(t, dir, "", false, "remote", "remove", "local"); code != ExitNotFound {
		t.Errorf("remove local: exit %d", code)
	}
}

// A server that presents another certificate than the pinned one is a hard error on every
// command, naming both fingerprints and how to trust it anew; nothing re-pins it.
func TestRemoteChangedFingerprint(t *testing.T) {
	d := newTrustDaemon(t)
	dir := t.TempDir()
	if code, _, errOut := remoteRun(t, dir, "", false, "remote", "add", "myhost", d.url, "--token", "tok-alice", "--accept-fingerprint", d.fingerprint()); code != 0 {
		t.Fatal(errOut)
	}
	pinned := d.fingerprint()
	d.newServerCert(t)
	code, out, errOut := remoteRun(t, dir, "", false, "--remote", "myhost", "sandbox", "list")
	want := "hiloop: the server at " + d.addr + " presents " + d.fingerprint() + ", but remote myhost is pinned to " + pinned +
		": if the server's certificate was replaced on purpose, `hiloop remote remove myhost` and add it again with a new trust token\n"
	if code == 0 || out != "" || errOut != want {
		t.Errorf("a changed fingerprint: exit %d, stdout %q, stderr\n%q\nwant\n%q", code, out, errOut, want)
	}
	if len(d.as) != 0 {
		t.Error("the server got a request from a client that does not trust it")
	}
	cfg, _ := remotes.Open(dir).Load()
	if r, _ := cfg.Get("myhost"); r.Fingerprint != pinned {
		t.Errorf("the pin changed to %s", r.Fingerprint)
	}
	_, out, _ = remoteRun(t, dir, "", false, "--host", "unix:///nonexistent/s.sock", "remote", "list")
	if !strings.Contains(out, "fingerprint changed") {
		t.Errorf("remote list does not say the fingerprint changed:\n%s", out)
	}
}

// --remote and --host beat HILOOP_REMOTE and HILOOP_HOST; the two flags together are refused.
func TestDaemonFlagsPrecedence(t *testing.T) {
	d := newTrustDaemon(t)
	dir := t.TempDir()
	if code, _, errOut := remoteRun(t, dir, "", false, "remote", "add", "myhost", d.url, "--token", "tok-alice", "--accept-fingerprint", d.fingerprint()); code != 0 {
		t.Fatal(errOut)
	}
	run := func(f *Factory, args ...string) (int, string) {
		ios, _, out, errOut := iostreams.Test()
		f.IO, f.ConfigDir = ios, dir
		code := Run(f, args)
		return code, out.String() + errOut.String()
	}
	// HILOOP_REMOTE over HILOOP_HOST.
	if code, out := run(&Factory{Remote: "myhost", Host: "unix:///nonexistent/s.sock"}, "sandbox", "list"); code != 0 || !strings.Contains(out, "alice-box") {
		t.Errorf("HILOOP_REMOTE over HILOOP_HOST: exit %d, %q", code, out)
	}
	// --host over HILOOP_REMOTE.
	if code, out := run(&Factory{Remote: "myhost"}, "--host", "unix:///nonexistent/s.sock", "sandbox", "list"); code != ExitUnreachable {
		t.Errorf("--host over HILOOP_REMOTE: exit %d, %q", code, out)
	}
	// --remote over HILOOP_HOST.
	if code, out := run(&Factory{Host: "unix:///nonexistent/s.sock"}, "--remote", "myhost", "sandbox", "list"); code != 0 {
		t.Errorf("--remote over HILOOP_HOST: exit %d, %q", code, out)
	}
	// --remote local is the unix socket HILOOP_HOST names.
	if code, out := run(&Factory{Host: "unix:///nonexistent/s.sock"}, "--remote", "local", "sandbox", "list"); code != ExitUnreachable || !strings.Contains(out, "/nonexistent/s.sock") {
		t.Errorf("--remote local: exit %d, %q", code, out)
	}
	if code, out := run(&Factory{}, "--remote", "myhost", "--host", "unix:///x.sock", "sandbox", "list"); code != ExitUsage || !strings.Contains(out, "give one") {
		t.Errorf("--remote with --host: exit %d, %q", code, out)
	}
	if code, out := run(&Factory{}, "--remote", "nosuch", "sandbox", "list"); code != ExitNotFound || !strings.Contains(out, "no remote named nosuch") {
		t.Errorf("--remote nosuch: exit %d, %q", code, out)
	}
}

// Tab after remote switch, rename and remove, and after --remote, offers the remotes from the
// config, never file names.
func TestRemoteCompletion(t *testing.T) {
	dir := t.TempDir()
	if _, err := remotes.Open(dir).Add(remotes.Remote{Name: "myhost", URL: "https://myhost.example:8443", Fingerprint: "SHA256:x", User: "alice", Auth: remotes.AuthToken},
		remotes.Credential{Token: "hl_x"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"remote", "switch", ""}, "local\tthe unix socket\nmyhost\thttps://myhost.example:8443\n:4\n"},
		{[]string{"remote", "remove", ""}, "myhost\thttps://myhost.example:8443\n:4\n"},
		{[]string{"remote", "rename", "myhost", ""}, ":4\n"},
		{[]string{"--remote", ""}, "local\tthe unix socket\nmyhost\thttps://myhost.example:8443\n:4\n"},
	} {
		code, out, errOut := remoteRun(t, dir, "", false, append([]string{"__complete"}, tc.args...)...)
		if code != 0 || out != tc.want {
			t.Errorf("%q <Tab>: exit %d, %q (stderr %q), want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
