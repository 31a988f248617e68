package daemon

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// An exposure with auth (pkg/api's Exposure.Auth) is served as HTTP by the daemon: a request
// passes to the sandbox's port only with the exposure's token, sent as the header
// api.ExposeTokenHeader or as the cookie a one-time link set. The token is signed with the
// exposure's secret (kept in its record), so it outlives a daemon restart and dies with the
// exposure; the one-time link tokens live in memory only: a link not opened before the daemon
// restarts is made again with `hiloop sandbox expose`.

// exposeLinkParam is the query parameter a one-time link carries.
const exposeLinkParam = "hiloop_token"

// newExposeSecret is a new exposure's signing key.
func newExposeSecret() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// exposeToken is a token of exposure rec good until expires: the expiry and a MAC over it and
// the exposure (its sandbox id and port), so that one exposure's token opens no other.
func exposeToken(rec store.Exposure, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return "v1." + exp + "." + base64.RawURLEncoding.EncodeToString(exposeMAC(rec, exp))
}

func exposeMAC(rec store.Exposure, exp string) []byte {
	m := hmac.New(sha256.New, rec.Secret)
	fmt.Fprintf(m, "v1|%s|%d|%s", rec.SandboxID, rec.Port, exp)
	return m.Sum(nil)
}

// validExposeToken reports whether tok is a token of rec that has not expired.
func validExposeToken(rec store.Exposure, tok string, now time.Time) bool {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || now.Unix() >= exp {
		return false
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[2])
	return err == nil && hmac.Equal(mac, exposeMAC(rec, parts[1]))
}

// exposeCookie is the cookie of the exposure on host port hostPort. Browsers keep cookies per
// host, not per port, so the name carries the port: two exposures of one host keep theirs.
func exposeCookie(hostPort int) string { return "hiloop-expose-" + strconv.Itoa(hostPort) }

// exposeLinks are the one-time link tokens not yet used, by exposure.
type exposeLinks struct {
	mu    sync.Mutex
	links map[string]exposeLinkEntry // by the token's hash
}

type exposeLinkEntry struct {
	exposure string // exposedKey
	expires  time.Time
}

// mint makes a link token for the exposure key, good for api.ExposeLinkTTL, and forgets
// expired ones.
func (l *exposeLinks) mint(key string, now time.Time) (token string, expires time.Time) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token = base64.RawURLEncoding.EncodeToString(b)
	expires = now.Add(api.ExposeLinkTTL)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.links == nil {
		l.links = map[string]exposeLinkEntry{}
	}
	for h, e := range l.links {
		if !now.Before(e.expires) {
			delete(l.links, h)
		}
	}
	l.links[linkHash(token)] = exposeLinkEntry{exposure: key, expires: expires}
	return token, expires
}

// use spends the link token of the exposure key: true once, if it is unexpired.
func (l *exposeLinks) use(key, token string, now time.Time) bool {
	h := linkHash(token)
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.links[h]
	if !ok || e.exposure != key {
		return false
	}
	delete(l.links, h)
	return now.Before(e.expires)
}

func linkHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return string(sum[:])
}

// link makes a new one-time link and a script token for exposure e.
func (x *exposer) link(e *exposed) *api.ExposureLink {
	now := time.Now()
	tok, linkExpires := x.links.mint(exposedKey(e.rec.SandboxID, e.rec.Port), now)
	host := e.rec.HostAddr
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			host = name
		}
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(e.rec.HostPort)), Path: "/",
		RawQuery: exposeLinkParam + "=" + tok}
	tokenExpires := now.Add(api.ExposeTokenTTL)
	return &api.ExposureLink{URL: u.String(), LinkExpiresAt: linkExpires,
		Token: exposeToken(e.rec, tokenExpires), TokenExpiresAt: tokenExpires}
}

// authHandler serves exposure e with auth: the link's exchange, the refusal of a request
// without the token, and the proxy to the sandbox's port for one with it.
func (x *exposer) authHandler(e *exposed) http.Handler {
	return exposeAuthHandler(e.rec, &x.links, func(ctx context.Context, addr string) (net.Conn, error) {
		return x.sandboxes.DialLoopback(ctx, e.rec.SandboxName, addr)
	})
}

// exposeAuthHandler is authHandler for the exposure rec, its links, and dial, which connects
// to an address on the sandbox's loopback.
func exposeAuthHandler(rec store.Exposure, links *exposeLinks, dial func(ctx context.Context, addr string) (net.Conn, error)) http.Handler {
	key := exposedKey(rec.SandboxID, rec.Port)
	again := "`hiloop sandbox expose " + bare(rec.SandboxName) + " " + strconv.Itoa(rec.Port) + "`"
	target := net.JoinHostPort("localhost", strconv.Itoa(rec.Port))
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: target})
			pr.Out.Host = pr.In.Host // the sandbox's server sees the address the browser used
			pr.SetXForwarded()
			stripExposeCredentials(pr.Out)
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return dial(ctx, target)
			},
			MaxIdleConnsPerHost: 16,
			DisableCompression:  true, // the client's Accept-Encoding, or none, as it sent it
			IdleConnTimeout:     30 * time.Second,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			status, msg := unreachable(rec, err)
			http.Error(w, "hiloop: "+msg, status)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		if tok := r.URL.Query().Get(exposeLinkParam); tok != "" {
			if !links.use(key, tok, now) {
				http.Error(w, "hiloop: this link was used already or has expired: make a new one with "+again, http.StatusUnauthorized)
				return
			}
			expires := now.Add(api.ExposeTokenTTL)
			http.SetCookie(w, &http.Cookie{Name: exposeCookie(rec.HostPort), Value: exposeToken(rec, expires),
				Path: "/", Expires: expires, HttpOnly: true, SameSite: http.SameSiteLaxMode})
			q := r.URL.Query()
			q.Del(exposeLinkParam)
			back := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
			http.Redirect(w, r, back.String(), http.StatusSeeOther)
			return
		}
		tok := r.Header.Get(api.ExposeTokenHeader)
		if tok == "" {
			if c, err := r.Cookie(exposeCookie(rec.HostPort)); err == nil {
				tok = c.Value
			}
		}
		if !validExposeToken(rec, tok, now) {
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "hiloop: this port is its owner's: open the link "+again+" prints, or send its token as "+api.ExposeTokenHeader, http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	})
}

// stripExposeCredentials removes the exposure's header and every exposure cookie from a
// request bound for a sandbox: its server never holds a credential of any exposure.
func stripExposeCredentials(r *http.Request) {
	r.Header.Del(api.ExposeTokenHeader)
	cookies := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cookies {
		if !strings.HasPrefix(c.Name, "hiloop-expose-") {
			r.AddCookie(c)
		}
	}
}

// unreachable is the status and message for a connection to the exposed port that failed.
func unreachable(rec store.Exposure, err error) (int, string) {
	var apiErr *api.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return http.StatusBadGateway, fmt.Sprintf("nothing listens on port %d in sandbox %q", rec.Port, bare(rec.SandboxName))
	case errors.As(err, &apiErr):
		return http.StatusServiceUnavailable, apiErr.Message
	}
	return http.StatusServiceUnavailable, err.Error()
}

// trackingListener hands out connections that e tracks until they close, hijacked or not, so
// that closing the exposure closes them all.
type trackingListener struct {
	net.Listener
	e *exposed
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.e.track(c, true)
	return &trackedConn{Conn: c, e: l.e}, nil
}

type trackedConn struct {
	net.Conn
	e    *exposed
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.e.track(c.Conn, false) })
	return c.Conn.Close()
}
