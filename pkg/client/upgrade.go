package client

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
)

// upgrader is the transport of the exec's websocket: it dials a connection of its own for the
// one request, writes the request and reads the answer, and a 101's body is the connection.
// http.Transport would add what a single upgrade never uses (its pool, two goroutines per
// connection, its proxy lookup), which a CLI process pays for at every exec: about 1 ms of
// hiloop sandbox exec (docs/performance.md). Port forwards do the same handshake by hand.
type upgrader struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (u upgrader) RoundTrip(req *http.Request) (*http.Response, error) {
	conn, err := u.dial(req.Context(), "tcp", req.URL.Host)
	if err != nil {
		return nil, err
	}
	// The handshake honours the request's context; the stream after it has no deadline.
	stop := context.AfterFunc(req.Context(), func() { conn.Close() })
	defer stop()
	br := bufio.NewReader(conn)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
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
