package client

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/pkg/api"
)

// DialPort connects to port on the loopback of the running sandbox name through the daemon (a
// port stream, pkg/api/port.go) and returns the connection, which carries the TCP stream's
// bytes. A port nothing listens on is an *api.Error with code port_not_listening.
func (c *Client) DialPort(ctx context.Context, name string, port int) (net.Conn, error) {
	conn, _, err := c.openPort(ctx, name, port, nil)
	return conn, err
}

// ForwardPort carries local, a connection this process accepted, to port on the loopback of
// the running sandbox name, until the forwarded connection has ended both ways or ctx is done;
// it closes local. On the daemon's unix socket a *net.TCPConn is handed to the daemon
// (pkg/api/port.go), which then joins it to the port itself: its bytes never pass through this
// process, and handedOff is true. Otherwise, or when the daemon does not take it, the bytes
// stream through here as DialPort's do. The error is about setting the forward up (a port
// nothing listens on is an *api.Error with code port_not_listening); how the stream ends after
// that, each end of it sees for itself.
func (c *Client) ForwardPort(ctx context.Context, name string, port int, local net.Conn) (handedOff bool, err error) {
	defer local.Close()
	var f *os.File
	if tc, ok := local.(*net.TCPConn); ok && c.local {
		// A copy of the descriptor, for the daemon to receive one of its own; the connection
		// stays non-blocking (File leaves it so unless Fd is called, and Send does not).
		f, _ = tc.File()
	}
	conn, taken, err := c.openPort(ctx, name, port, f)
	if f != nil {
		f.Close()
	}
	if err != nil {
		return false, err
	}
	if !taken {
		stop := context.AfterFunc(ctx, func() { local.Close(); conn.Close() })
		defer stop()
		_, _, _ = netcopy.Join(local, conn)
		return false, nil
	}
	// The daemon's descriptor carries the connection now: closing ours does not end it. The
	// API connection is the forward's lifeline; the daemon closes it when the forward is over,
	// and closing it here (ctx done, or this process exiting) makes the daemon end the forward.
	local.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_, _ = io.Copy(io.Discard, conn)
	conn.Close()
	return true, nil
}

// openPort makes a port stream's request and returns its connection once the daemon switched
// it. With f (on the unix socket), f's descriptor goes with the request, and taken says whether
// the daemon kept it to carry the stream itself.
func (c *Client) openPort(ctx context.Context, name string, port int, f *os.File) (_ net.Conn, taken bool, _ error) {
	conn, err := c.dial(ctx, "tcp", strings.TrimPrefix(c.baseURL, "http://")) // a unix socket's dial ignores both
	if err != nil {
		if dialErr := c.dialError(err); dialErr != nil {
			return nil, false, dialErr
		}
		return nil, false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		c.baseURL+"/v1/sandboxes/"+url.PathEscape(name)+"/ports/"+strconv.Itoa(port), nil)
	if err != nil {
		conn.Close()
		return nil, false, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.PortUpgrade)
	c.authorize(req.Header)
	// The request's first write carries the descriptor, where the socket can carry one.
	w := conn
	if f != nil {
		if w = handoff.Send(conn, []*os.File{f}); w != conn {
			req.Header.Set(api.PortHandoffHeader, api.PortHandoffConn)
		}
	}
	resp, br, err := handshake(ctx, conn, w, req)
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, fmt.Errorf("port %d of %q: %w", port, name, err)
	}
	if v := resp.Header.Get(api.VersionHeader); v != "" {
		c.daemonVersion.Store(v)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, false, decodeError(resp)
	}
	if w != conn && resp.Header.Get(api.PortHandoffHeader) == api.PortHandoffConn {
		return conn, true, nil // a lifeline: nothing is read from it but its end
	}
	netcopy.WidenUnix(conn)
	if br.Buffered() > 0 {
		// The stream's first bytes came with the answer.
		return &bufferedConn{Conn: conn, r: br}, false, nil
	}
	return conn, false, nil // a bare socket, which a copy can splice
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
