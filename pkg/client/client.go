// Package client is the Go SDK for sandboxd's API. The hiloop CLI is its first user.
//
// Errors the daemon returns come back as *api.Error, so callers can use errors.As and switch on
// the code; a daemon that cannot be reached is an *UnreachableError.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
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

	"github.com/hiloop/hiloop/pkg/api"
)

// DefaultHost is where the daemon listens unless HILOOP_HOST says otherwise.
const DefaultHost = "unix:///run/sandboxd/sandboxd.sock"

// Client talks to one sandboxd.
type Client struct {
	host    string // as the user gave it, for messages
	baseURL string // http://unix or http://host:port
	token   string
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
	if errors.Is(e.Err, syscall.EACCES) {
		hint = "the socket is not accessible to this user: run as root or as a member of the socket's group"
	}
	return fmt.Sprintf("cannot reach sandboxd at %s (%s): %s", e.Host, shortNetErr(e.Err), hint)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// New returns a client for host: "unix:///path/to/sock" or "http://host:port". token is sent as
// a bearer token (needed for TCP).
func New(host, token string) (*Client, error) {
	if host == "" {
		host = DefaultHost
	}
	c := &Client{host: host, token: token}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("invalid host %q: use unix:///path or http://host:port", host)
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
	default:
		return nil, fmt.Errorf("invalid host %q: use unix:///path or http://host:port", host)
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
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
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

// transportError turns a dial failure into an *UnreachableError.
func (c *Client) transportError(err error) error {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return &UnreachableError{Host: c.host, Err: opErr.Err}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("talk to sandboxd at %s: %w", c.host, err)
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
