package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/pkg/api"
)

// portStream serves GET /v1/sandboxes/{name}/ports/{port} (pkg/api/port.go): it connects to
// the port on the sandbox's loopback, switches the connection to raw TCP and joins the two.
func (d *Daemon) portStream(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	port, err := api.ParsePort("port", r.PathValue("port"))
	if err != nil {
		return err
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), api.PortUpgrade) {
		return api.Errorf(api.CodeBadRequest, "a port stream needs the headers Connection: Upgrade and Upgrade: %s", api.PortUpgrade)
	}
	// Connected before the answer, so that a port nothing listens on is a clear error.
	upstream, err := d.sandboxes.DialLoopback(r.Context(), name, net.JoinHostPort("localhost", strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return api.Errorf(api.CodePortNotListening, "nothing listens on port %d in sandbox %q (on 127.0.0.1 or ::1)", port, name)
		}
		return err
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return fmt.Errorf("port stream: %w", err)
	}
	// The server's deadlines are for requests; this is a stream now.
	_ = conn.SetDeadline(time.Time{})
	_, err = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.PortUpgrade + "\r\n\r\n")
	if err == nil {
		err = buf.Flush()
	}
	if err == nil && buf.Reader.Buffered() > 0 {
		// What the client sent right after its request is the stream's first bytes.
		b, _ := buf.Reader.Peek(buf.Reader.Buffered())
		_, err = upstream.Write(b)
	}
	if err != nil {
		conn.Close()
		upstream.Close()
		return nil
	}
	// The bare socket under the connection limiter's wrapper lets the copy splice; closing the
	// wrapper is what tells the limiter the connection is gone.
	raw := netcopy.Bare(conn)
	netcopy.WidenUnix(raw)
	_, _, _ = netcopy.Join(raw, upstream)
	conn.Close()
	return nil
}

// headerHas reports whether one of the comma-separated tokens of header key is token, ignoring
// case (Connection: keep-alive, Upgrade).
func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
