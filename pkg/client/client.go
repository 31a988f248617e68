// Package client is the Go SDK for sandboxd's API. The hiloop CLI is its first user.
//
// Errors the daemon returns come back as *api.Error, so callers can use errors.As and switch on
// the code; a daemon that cannot be reached is an *UnreachableError, and a server whose
// certificate is not the pinned one a *FingerprintMismatchError.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/pkg/api"
)

// DefaultHost is where the daemon listens unless HILOOP_HOST says otherwise.
const DefaultHost = "unix:///run/sandboxd/sandboxd.sock"

// Client talks to one sandboxd.
type Client struct {
	host string // as the user gave it, for messages
	// baseURL is http://unix or http://host:port, also for an https:// host: its dial makes
	// the TLS connection, so every way in (the pooled transport, an exec's, a port stream's and
	// a session stream's own connections) shares the one TLS setup.
	baseURL string
	token   string
	as      string // Hiloop-As
	http    *retryablehttp.Client
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	local   bool // on the daemon's unix socket

	daemonVersion atomic.Value // string: the version the daemon last reported
}

// DaemonVersion returns the version the daemon reported on its last answer ("" before any).
func (c *Client) DaemonVersion() string {
	v, _ := c.daemonVersion.Load().(string)
	return v
}

// UnreachableError says the daemon could not be reached at all.
type UnreachableError struct {
	Host string
	Err  error
}

func (e *UnreachableError) Error() string {
	hint := "start it with `sudo sandboxd` or point HILOOP_HOST at a running daemon"
	if strings.HasPrefix(e.Host, "https://") {
		hint = "check the address, and that sandboxd runs there with --listen on it"
	}
	if errors.Is(e.Err, syscall.EACCES) {
		hint = "the socket is not accessible to this user: run as root or as a member of the socket's group"
	}
	return fmt.Sprintf("cannot reach sandboxd at %s (%s): %s", e.Host, shortNetErr(e.Err), hint)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// New returns a client for host: "unix:///path/to/sock", "http://host:port" or
// "https://host:port" (its certificate verified by the system's roots). token is sent as a
// bearer token. NewWithOptions takes a pinned fingerprint, a client certificate and more.
func New(host, token string) (*Client, error) {
	return NewWithOptions(Options{Host: host, Token: token})
}

// Options configure a client made by NewWithOptions.
type Options struct {
	// Host is the daemon: "unix:///path/to/sock" (DefaultHost when empty), "http://host:port",
	// or "https://host:port" (port 443 when left out).
	Host string
	// Token is sent as a bearer token (Authorization: Bearer): a user's API token, "hl_...".
	Token string
	// TLS configures an https:// host; nil is the zero TLSOptions.
	TLS *TLSOptions
	// As names the user in whose namespace an admin's calls act (the Hiloop-As header).
	As string
	// Remote names the configured remote Host is, for messages: a changed fingerprint's says
	// how to trust that remote anew.
	Remote string
}

const invalidHostHint = "use unix:///path, https://host:port or http://host:port"

// NewWithOptions returns a client for o.Host.
func NewWithOptions(o Options) (*Client, error) {
	host := o.Host
	if host == "" {
		host = DefaultHost
	}
	c := &Client{host: host, token: o.Token, as: o.As}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("invalid host %q: %s", host, invalidHostHint)
	}
	if o.TLS != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid host %q: TLS options need an https:// host", host)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	switch u.Scheme {
	case "unix":
		if u.Path == "" {
			return nil, fmt.Errorf("invalid host %q: unix:// needs a socket path, e.g. %s", host, DefaultHost)
		}
		path := u.Path
		c.baseURL = "http://unix"
		c.local = true
		c.dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", path)
		}
	case "http":
		if u.Host == "" {
			return nil, fmt.Errorf("invalid host %q: use http://host:port", host)
		}
		c.baseURL = "http://" + u.Host
		c.dial = dialer.DialContext
	case "https":
		if u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("invalid host %q: use https://host:port", host)
		}
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "443")
		}
		tlsOpts := TLSOptions{}
		if o.TLS != nil {
			tlsOpts = *o.TLS
		}
		cfg, err := tlsOpts.config(u.Hostname(), addr, o.Remote)
		if err != nil {
			return nil, err
		}
		c.baseURL = "http://" + addr
		c.dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialTLS(ctx, dialer, addr, cfg)
		}
	default:
		return nil, fmt.Errorf("invalid host %q: %s", host, invalidHostHint)
	}
	transport := &http.Transport{DialContext: c.dial, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second}
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: transport}
	rc.Logger = nil
	rc.RetryMax = 3
	rc.RetryWaitMin = 50 * time.Millisecond
	rc.RetryWaitMax = 500 * time.Millisecond
	rc.CheckRetry = checkRetry
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	c.http = rc
	return c, nil
}

// dialTLS connects to addr and completes the TLS handshake within ctx.
func dialTLS(ctx context.Context, dialer *net.Dialer, addr string, cfg *tls.Config) (net.Conn, error) {
	raw, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(netcopy.ReadBuffered(raw), cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// authorize sets a request's credential and the namespace it acts in.
func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	if c.as != "" {
		h.Set(api.AsHeader, c.as)
	}
}

// SetAs makes every later call act in user's namespace, as an admin may (the Hiloop-As
// header); "" returns to the caller's own. The daemon refuses it from a user who is not an
// admin.
func (c *Client) SetAs(user string) { c.as = user }

// Host returns the address the client talks to.
func (c *Client) Host() string { return c.host }

// checkRetry retries only what is safe: a request the daemon never received, or a request that
// is safe to repeat (GET, PUT, which replaces a whole resource, or a mutating call carrying an
// idempotency key) that met a transient fault.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		// A refused or missing socket will not appear within a retry's wait: fail fast.
		return false, nil
	}
	safe := resp.Request.Method == http.MethodGet || resp.Request.Method == http.MethodPut || resp.Request.Header.Get(api.IdempotencyKeyHeader) != ""
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return safe, nil
	}
	return false, nil
}

// NewIdempotencyKey returns a random key for a mutating call.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CallOption changes one call.
type CallOption func(*http.Request)

// WithIdempotencyKey sends key as the call's Idempotency-Key instead of a fresh random one.
func WithIdempotencyKey(key string) CallOption {
	return func(r *http.Request) { r.Header.Set(api.IdempotencyKeyHeader, key) }
}

// AllUsers makes a list call list every user's resources, each with its owner: an admin's
// (all_users=true); the daemon refuses it from a user who is not an admin.
func AllUsers() CallOption {
	return func(r *http.Request) {
		q := r.URL.Query()
		q.Set("all_users", "true")
		r.URL.RawQuery = q.Encode()
	}
}

// do sends a request and decodes a JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, in, out any, opts ...CallOption) error {
	resp, err := c.send(ctx, method, path, in, opts...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s answer: %w", method, path, err)
	}
	return nil
}

// send sends a request; an error status becomes *api.Error. The caller closes the body.
func (c *Client) send(ctx context.Context, method, path string, in any, opts ...CallOption) (*http.Response, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, err
		}
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, c.baseURL+path, bodyReader(body))
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req.Header)
	if method != http.MethodGet {
		// A key on every mutating call makes the client's own retries safe.
		req.Header.Set(api.IdempotencyKeyHeader, NewIdempotencyKey())
	}
	for _, o := range opts {
		o(req.Request)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	if v := resp.Header.Get(api.VersionHeader); v != "" {
		c.daemonVersion.Store(v)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func bodyReader(b []byte) io.Reader {
	if b == nil {
		return nil
	}
	return bytes.NewReader(b)
}

// transportError turns a dial failure into an *UnreachableError; a server that is not the
// pinned one is its *FingerprintMismatchError alone, whatever call met it.
func (c *Client) transportError(err error) error {
	if dialErr := c.dialError(err); dialErr != nil {
		return dialErr
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("talk to sandboxd at %s: %w", c.host, err)
}

// dialError is what a connection of a stream's own (an exec's, a port's, a session's) that
// failed to open is to the caller: a server that is not the pinned one, an *UnreachableError
// for a failed dial, or nil for any other failure.
func (c *Client) dialError(err error) error {
	var mismatch *FingerprintMismatchError
	if errors.As(err, &mismatch) {
		return mismatch
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return &UnreachableError{Host: c.host, Err: opErr.Err}
	}
	return nil
}

func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, api.MaxBodyBytes))
	var body api.ErrorBody
	if json.Unmarshal(data, &body) == nil && body.Error != nil && body.Error.Code != "" {
		return body.Error
	}
	return &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("sandboxd answered %s: %s", resp.Status, strings.TrimSpace(string(data)))}
}

func shortNetErr(err error) string {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return "no such socket"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EACCES):
		return "permission denied"
	}
	return err.Error()
}
