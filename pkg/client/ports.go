package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/pkg/api"
)

// DialPort connects to port on the loopback of the running sandbox name through the daemon (a
// port stream, pkg/api/port.go) and returns the connection, which carries the TCP stream's
// bytes. A port nothing listens on is an *api.Error with code port_not_listening.
func (c *Client) DialPort(ctx context.Context, name string, port int) (net.Conn, error) {
	conn, err := c.dial(ctx, "tcp", strings.TrimPrefix(c.baseURL, "http://")) // a unix socket's dial ignores both
	if err != nil {
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return nil, &UnreachableError{Host: c.host, Err: opErr.Err}
		}
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		c.baseURL+"/v1/sandboxes/"+url.PathEscape(name)+"/ports/"+strconv.Itoa(port), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.PortUpgrade)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// The handshake honours ctx; the stream after it has no deadline.
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	br := bufio.NewReader(conn)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("port %d of %q: %w", port, name, err)
	}
	if v := resp.Header.Get(api.VersionHeader); v != "" {
		c.daemonVersion.Store(v)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, decodeError(resp)
	}
	if !stop() {
		conn.Close()
		return nil, ctx.Err()
	}
	_ = conn.SetDeadline(time.Time{})
	netcopy.WidenUnix(conn)
	if br.Buffered() > 0 {
		// The stream's first bytes came with the answer.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil // a bare socket, which a copy can splice
}

// bufferedConn reads what its reader has buffered before the connection itself.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// CloseWrite half-closes the connection, as the socket under it does.
func (b *bufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}
