package client

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// upgrader is the transport of the exec's websocket: it dials a connection of its own for the
// one request, writes the request and reads the answer, and a 101's body is the connection.
// http.Transport would add what a single upgrade never uses (its pool, two goroutines per
// connection, its proxy lookup), which a CLI process pays for at every exec: about 1 ms of
// hiloop sandbox exec (docs/performance.md). Port forwards share its handshake.
type upgrader struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (u upgrader) RoundTrip(req *http.Request) (*http.Response, error) {
	conn, err := u.dial(req.Context(), "tcp", req.URL.Host)
	if err != nil {
		return nil, err
	}
	resp, br, err := handshake(req.Context(), conn, conn, req)
	if err != nil {
		conn.Close()
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &bufferedConn{Conn: conn, r: br}
	} else {
		resp.Body = closeWith{resp.Body, conn}
	}
	return resp, nil
}

// handshake writes req on w (conn, or conn carrying descriptors with the request's first
// write) and reads the answer from conn, within ctx; the connection has no deadline after it.
// The reader it returns may hold the first bytes after the answer.
func handshake(ctx context.Context, conn net.Conn, w io.Writer, req *http.Request) (*http.Response, *bufio.Reader, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	br := bufio.NewReader(conn)
	err := req.Write(w)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if err != nil {
		return nil, nil, err
	}
	if !stop() {
		resp.Body.Close()
		return nil, nil, ctx.Err()
	}
	_ = conn.SetDeadline(time.Time{})
	return resp, br, nil
}

// closeWith is a response body that closes its connection with it.
type closeWith struct {
	io.ReadCloser
	conn net.Conn
}

func (c closeWith) Close() error {
	err := c.ReadCloser.Close()
	c.conn.Close()
	return err
}
