package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/users"
	"github.com/hiloop/hiloop/pkg/api"
)

// How a request authenticated (api.WhoAmI's Via).
const (
	viaUnix        = "unix"
	viaCertificate = "certificate"
	viaToken       = "token"
	viaFront       = "front"
)

// credential is what a request on the TCP listener authenticated with: the user, and the
// certificate's fingerprint or the API token's name. A revocation ends the connections that
// carried it.
type credential struct {
	via         string
	user        string
	token       string // the API token's name
	tokenID     string // and its users.TokenID
	fingerprint string // the client certificate's
}

type credentialKey struct{}

// credentialOf returns the credential r authenticated with; ok is false on the unix socket.
func credentialOf(r *http.Request) (credential, bool) {
	c, ok := r.Context().Value(credentialKey{}).(credential)
	return c, ok
}

// errNoCredential answers a request on the TCP listener that carries no credential the daemon
// knows: the same words whether it carried none, an unknown one or a revoked one.
var errNoCredential = api.Errorf(api.CodeUnauthorized, "no client certificate or API token: add this host with `hiloop remote add`, or send an API token (`hiloop user token create`) as Authorization: Bearer")

// trustPath is the one route served on the TCP listener without a credential: the trust
// exchange, whose trust token is the credential.
const trustPath = "/v1/trust"

// authenticator turns a request on the TCP listener into the user it acts as: the user of its
// verified client certificate (one the daemon issued, to a user who still exists, not
// expired) or of its API token (Authorization: Bearer hl_...). It slows down an address that
// fails too often (failLimiter) and keeps track of the connections each credential carries,
// so that a revocation ends them (liveConns).
type authenticator struct {
	users userStore
	// fronts are the CAs of a cluster's fronts (--front-ca), nil without.
	fronts *x509.CertPool
	limit  *failLimiter
	live   *liveConns
	log    *slog.Logger
}

func newAuthenticator(u userStore, log *slog.Logger) *authenticator {
	a := &authenticator{users: u, limit: newFailLimiter(log), live: newLiveConns(), log: log}
	u.OnRevoke(a.live.revokeUser)
	u.OnRevokeCredential(a.live.revokeCredential)
	return a
}

// guard makes srv, a TCP listener's server, serve its handler to authenticated requests only,
// and track each connection by its credential (to close it on revocation) before whatever
// ConnState srv had.
func (a *authenticator) guard(srv *http.Server) {
	srv.Handler = a.wrap(srv.Handler)
	srv.ConnContext = withConn
	srv.ConnState = chainConnState(a.live.connState, srv.ConnState)
}

// wrap serves next to the requests that authenticate, each with its principal in its context.
func (a *authenticator) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == trustPath && r.Method == http.MethodPost {
			a.serveTrust(w, r, next)
			return
		}
		cred, who, err := a.authenticate(r)
		if err != nil {
			a.refuse(w, r, err)
			return
		}
		conn, _ := r.Context().Value(connKey{}).(net.Conn)
		a.live.bind(conn, cred)
		defer a.live.done(conn)
		// Bound first, checked again after: a revocation that committed before this check
		// refuses the request, and one after it finds the connection bound and closes it.
		if ok, err := a.stillValid(cred); err != nil || !ok {
			a.refuse(w, r, orElse(err, errNoCredential))
			return
		}
		p, err := withAs(r, identity.Principal{User: who.User, Admin: who.Admin})
		if err != nil {
			writeError(w, a.log, err)
			return
		}
		ctx := identity.With(context.WithValue(r.Context(), credentialKey{}, cred), p)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// orElse is err, or otherwise when err is nil.
func orElse(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// authenticate finds the credential of r. A client certificate the TLS handshake verified
// against the daemon's CA is looked up by fingerprint; then a bearer token, unless r's address
// has failed too often.
func (a *authenticator) authenticate(r *http.Request) (credential, users.Who, error) {
	addr := remoteAddr(r)
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		fp := pki.Fingerprint(r.TLS.PeerCertificates[0].Raw)
		if a.fronts != nil && verifiedBy(r.TLS.PeerCertificates, a.fronts) {
			return frontCredential(r, fp)
		}
		who, ok, err := a.users.ByCertificate(fp)
		if err != nil {
			return credential{}, users.Who{}, err
		}
		if ok {
			return credential{via: viaCertificate, user: who.User, fingerprint: fp}, who, nil
		}
	}
	if wait := a.limit.wait(addr); wait > 0 {
		return credential{}, users.Who{}, tooManyAttempts(wait)
	}
	if value, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		value = strings.TrimSpace(value)
		who, name, ok, err := a.users.ByToken(value)
		if err != nil {
			return credential{}, users.Who{}, err
		}
		if ok {
			return credential{via: viaToken, user: who.User, token: name, tokenID: users.TokenID(value)}, who, nil
		}
	}
	a.limit.failed(addr)
	return credential{}, users.Who{}, errNoCredential
}

// verifiedBy tells whether chain, a client's certificates as the handshake gave them, leads to
// one of roots for client authentication.
func verifiedBy(chain []*x509.Certificate, roots *x509.CertPool) bool {
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// frontCredential is the credential of a request a cluster's front sent, whose certificate
// (fingerprint fp) a front CA signed: the user it names in api.FrontUserHeader, who is an
// admin when api.FrontAdminHeader is "true". The front authenticated the user; the users
// themselves live in the cluster, not in this daemon's store.
func frontCredential(r *http.Request, fp string) (credential, users.Who, error) {
	name := r.Header.Get(api.FrontUserHeader)
	if err := api.ValidateName("user", name); err != nil {
		return credential{}, users.Who{}, api.Errorf(api.CodeUnauthorized, "a front's request names no valid user in %s: %v", api.FrontUserHeader, err)
	}
	var admin bool
	switch v := r.Header.Get(api.FrontAdminHeader); v {
	case "", "false":
	case "true":
		admin = true
	default:
		return credential{}, users.Who{}, api.Errorf(api.CodeUnauthorized, "a front's request has %s %q: use true or false", api.FrontAdminHeader, v)
	}
	return credential{via: viaFront, user: name, fingerprint: fp}, users.Who{User: name, Admin: admin}, nil
}

// stillValid looks cred up again.
func (a *authenticator) stillValid(cred credential) (bool, error) {
	switch cred.via {
	case viaFront:
		// The handshake verified the front's certificate; it holds no revocable record here.
		return true, nil
	case viaCertificate:
		_, ok, err := a.users.ByCertificate(cred.fingerprint)
		return ok, err
	case viaToken:
		return a.users.LiveToken(cred.tokenID)
	}
	return false, nil
}

// refuse answers a request that did not authenticate. The connection is closed after the
// answer: a client without a credential holds none open.
func (a *authenticator) refuse(w http.ResponseWriter, r *http.Request, err error) {
	var ta *tooManyAttemptsError
	if errors.As(err, &ta) {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ta.wait.Seconds()))))
	}
	w.Header().Set("Connection", "close")
	writeError(w, a.log, err)
}

// serveTrust serves the trust exchange without a credential; a trust token it refuses counts
// as a failed authentication of the address.
func (a *authenticator) serveTrust(w http.ResponseWriter, r *http.Request, next http.Handler) {
	addr := remoteAddr(r)
	if wait := a.limit.wait(addr); wait > 0 {
		a.refuse(w, r, tooManyAttempts(wait))
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	if sw.status == http.StatusUnauthorized {
		a.limit.failed(addr)
	}
}

// withAs gives p the namespace Hiloop-As names: an admin's, or the caller's own name.
func withAs(r *http.Request, p identity.Principal) (identity.Principal, error) {
	vals := r.Header.Values(api.AsHeader)
	if len(vals) == 0 {
		return p, nil
	}
	if len(vals) > 1 {
		return p, api.Errorf(api.CodeBadRequest, "%s is given %d times: give it once", api.AsHeader, len(vals))
	}
	as := vals[0]
	if !p.Admin {
		return p, api.Errorf(api.CodeForbidden, "only an admin acts as another user (%s)", api.AsHeader)
	}
	if err := api.ValidateName("user", as); err != nil {
		return p, err
	}
	if as != p.User {
		p.As = as
	}
	return p, nil
}

// remoteAddr is the address r came from, as the failure limit counts it.
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// tooManyAttemptsError is the answer to an address over its failure limit, and when to try again.
type tooManyAttemptsError struct {
	err  *api.Error
	wait time.Duration
}

func (e *tooManyAttemptsError) Error() string { return e.err.Error() }
func (e *tooManyAttemptsError) Unwrap() error { return e.err }

func tooManyAttempts(wait time.Duration) *tooManyAttemptsError {
	return &tooManyAttemptsError{
		err:  api.Errorf(api.CodeTooManyAttempts, "too many failed authentications from this address: try again in %s", wait.Round(time.Second)),
		wait: wait,
	}
}

// The failure limit: an address may fail failBurst times in a row, then once each failEvery.
const (
	failBurst    = 10
	failEvery    = 6 * time.Second
	failLogEvery = time.Minute
	// failMaxAddrs bounds the addresses remembered; the ones back to a full allowance go
	// first.
	failMaxAddrs = 1 << 16
)

// failLimiter is a token bucket per remote address (an IPv6 address's /64) of failed
// authentications. An address over it is refused without its credential being looked at,
// and said in the log at most once a minute.
type failLimiter struct {
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	addrs map[netip.Prefix]*failBucket
}

type failBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
	logged time.Time // when the address was last said in the log
}

func newFailLimiter(log *slog.Logger) *failLimiter {
	return &failLimiter{log: log, now: time.Now, addrs: map[netip.Prefix]*failBucket{}}
}

func failKey(addr netip.Addr) netip.Prefix {
	bits := addr.BitLen()
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

// refill brings b up to now; the caller holds l.mu.
func (l *failLimiter) refill(b *failBucket, now time.Time) {
	b.tokens = min(failBurst, b.tokens+float64(now.Sub(b.at))/float64(failEvery))
	b.at = now
}

// wait returns how long addr must wait before its credential is looked at again; 0: now.
func (l *failLimiter) wait(addr netip.Addr) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.addrs[failKey(addr)]
	if b == nil {
		return 0
	}
	now := l.now()
	l.refill(b, now)
	if b.tokens >= 1 {
		return 0
	}
	if now.Sub(b.logged) >= failLogEvery {
		b.logged = now
		l.log.Warn("too many failed authentications: refusing the address for a while", "addr", addr.String())
	}
	return time.Duration((1 - b.tokens) * float64(failEvery))
}

// failed counts a failed authentication of addr.
func (l *failLimiter) failed(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := failKey(addr)
	now := l.now()
	b := l.addrs[key]
	if b == nil {
		l.makeRoom(now)
		b = &failBucket{tokens: failBurst, at: now}
		l.addrs[key] = b
	}
	l.refill(b, now)
	b.tokens = max(0, b.tokens-1)
}

// makeRoom, when the map is full, forgets a tenth of it: the addresses back to a full allowance
// first, then those not held back now, and only then any (a flood of addresses each over its
// limit). A tenth at a time, so that a flood pays for a sweep once in thousands of failures.
func (l *failLimiter) makeRoom(now time.Time) {
	if len(l.addrs) < failMaxAddrs {
		return
	}
	target := failMaxAddrs * 9 / 10
	for _, forget := range []func(*failBucket) bool{
		func(b *failBucket) bool { return b.tokens >= failBurst },
		func(b *failBucket) bool { return b.tokens >= 1 },
		func(*failBucket) bool { return true },
	} {
		for k, b := range l.addrs {
			if len(l.addrs) <= target {
				return
			}
			if l.refill(b, now); forget(b) {
				delete(l.addrs, k)
			}
		}
	}
}

// liveConns is the TCP listener's connections by the credentials their requests carried,
// so that revoking a user or a token closes them: keep-alive connections between requests,
// and connections a stream hijacked (exec, port forwards, session streams) while it runs.
type liveConns struct {
	mu    sync.Mutex
	conns map[net.Conn]*liveConn
}

type liveConn struct {
	creds    map[credential]bool
	hijacked bool
}

func newLiveConns() *liveConns {
	return &liveConns{conns: map[net.Conn]*liveConn{}}
}

// bind records that c carries cred.
func (l *liveConns) bind(c net.Conn, cred credential) {
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.conns[c]
	if lc == nil {
		lc = &liveConn{creds: map[credential]bool{}}
		l.conns[c] = lc
	}
	lc.creds[cred] = true
}

// done is called when a request on c has been served: a hijacked connection is no HTTP
// server's any more, and its stream is over.
func (l *liveConns) done(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc := l.conns[c]; lc != nil && lc.hijacked {
		delete(l.conns, c)
	}
}

// connState is the http.Server's ConnState hook.
func (l *liveConns) connState(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateHijacked:
		if lc := l.conns[c]; lc != nil {
			lc.hijacked = true
		}
	case http.StateClosed:
		delete(l.conns, c)
	}
}

// revokeUser closes every connection that carried a credential of user.
func (l *liveConns) revokeUser(user string) {
	l.close(userMatch(user))
}

// revokeCredential closes every connection that carried the credential r: an API token, or a
// client certificate.
func (l *liveConns) revokeCredential(r users.Revoked) {
	switch {
	case r.Token != "":
		l.close(tokenMatch(r.User, r.Token))
	case r.Fingerprint != "":
		l.close(certMatch(r.User, r.Fingerprint))
	}
}

func userMatch(user string) func(credential) bool {
	return func(c credential) bool { return c.user == user }
}

func tokenMatch(user, name string) func(credential) bool {
	return func(c credential) bool { return c.via == viaToken && c.user == user && c.token == name }
}

func certMatch(user, fingerprint string) func(credential) bool {
	return func(c credential) bool {
		return c.via == viaCertificate && c.user == user && c.fingerprint == fingerprint
	}
}

// spareCaller takes the connection of r out of a revocation's reach when r carries a credential
// it revokes (a user revoking their own token): the call is answered, and the connection closed
// after the answer rather than under it.
func (l *liveConns) spareCaller(w http.ResponseWriter, r *http.Request, match func(credential) bool) {
	cred, ok := credentialOf(r)
	if !ok || !match(cred) {
		return
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	w.Header().Set("Connection", "close")
}

func (l *liveConns) close(match func(credential) bool) {
	l.mu.Lock()
	var doomed []net.Conn
	for c, lc := range l.conns {
		for cred := range lc.creds {
			if match(cred) {
				doomed = append(doomed, c)
				break
			}
		}
	}
	l.mu.Unlock()
	for _, c := range doomed {
		// The socket under TLS: closing the TLS connection itself would first try to send
		// close_notify, which waits behind a write stuck on a client that does not read.
		if tc, ok := c.(*tls.Conn); ok {
			tc.NetConn().Close()
			continue
		}
		c.Close()
	}
}

// chainConnState returns a ConnState hook calling first then second; either may be nil.
func chainConnState(first, second func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	if first == nil {
		return second
	}
	if second == nil {
		return first
	}
	return func(c net.Conn, s http.ConnState) {
		first(c, s)
		second(c, s)
	}
}

// statusWriter notes the status of the answer it writes.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes an answer that streams (an image build's events).
func (w *statusWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
