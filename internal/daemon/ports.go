package daemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/pkg/api"
)

// portStream serves GET /v1/sandboxes/{name}/ports/{port} (pkg/api/port.go): it connects to
// the port on the sandbox's loopback, switches the connection to raw TCP and joins the two. A
// connection a local client handed off with the request is joined to the port instead, and the
// API connection is left to say whether the client is still there.
func (d *Daemon) portStream(w http.ResponseWriter, r *http.Request) error {
	// Taken before anything can fail, so that every way out closes it (closing it again
	// after the join is harmless).
	local := takePortConn(r)
	if local != nil {
		defer local.Close()
	}
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
			return api.Errorf(api.CodePortNotListening, "nothing listens on port %d in sandbox %q (on 127.0.0.1 or ::1)", port, bare(name))
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
	head := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.PortUpgrade + "\r\n"
	if local != nil {
		head += api.PortHandoffHeader + ": " + api.PortHandoffConn + "\r\n"
	}
	_, err = buf.WriteString(head + "\r\n")
	if err == nil {
		err = buf.Flush()
	}
	if err == nil && local == nil && buf.Reader.Buffered() > 0 {
		// What the client sent right after its request is the stream's first bytes.
		b, _ := buf.Reader.Peek(buf.Reader.Buffered())
		_, err = upstream.Write(b)
	}
	if err != nil {
		conn.Close()
		upstream.Close()
		return nil
	}
	if local != nil {
		joinHandedOff(local, upstream, conn)
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

// takePortConn adopts the connection a local client handed off with r (pkg/api's port
// handoff): one descriptor, of a stream socket, announced by PortHandoffHeader. Anything else
// that came is closed, and the request streams.
func takePortConn(r *http.Request) net.Conn {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	files := handoff.Take(c)
	defer closeFiles(files) // FileConn makes a descriptor of its own
	if len(files) != 1 || r.Header.Get(api.PortHandoffHeader) != api.PortHandoffConn || !streamSocket(files[0]) {
		return nil
	}
	conn, err := net.FileConn(files[0])
	if err != nil {
		return nil
	}
	return conn
}

// streamSocket says whether f is a stream socket: a TCP connection, as a client hands off.
func streamSocket(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var (
		st  unix.Stat_t
		typ int
	)
	cerr := rc.Control(func(fd uintptr) {
		if err = unix.Fstat(int(fd), &st); err == nil {
			typ, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE)
		}
	})
	return cerr == nil && err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK && typ == unix.SOCK_STREAM
}

// joinHandedOff joins a handed-off connection to the port's for as long as lifeline, the
// upgraded API connection, says the client is there: the client closing it (or exiting) ends
// both, and the end of the join closes it. Nothing but its end is read from it.
func joinHandedOff(local, upstream, lifeline net.Conn) {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		_, _ = io.Copy(io.Discard, netcopy.Bare(lifeline))
		local.Close()
		upstream.Close()
	}()
	_, _, _ = netcopy.Join(local, upstream)
	lifeline.Close()
	<-gone
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
