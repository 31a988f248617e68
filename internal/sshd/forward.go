package sshd

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	glider "github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// dialTimeout bounds connecting a forward to a port in the sandbox.
const dialTimeout = 10 * time.Second

// directTCPIP is the payload of a "direct-tcpip" channel open (RFC 4254 7.2).
type directTCPIP struct {
	Host       string
	Port       uint32
	OriginHost string
	OriginPort uint32
}

// handleDirectTCPIP serves ssh -L and -W: a connection to a port on the sandbox's own
// loopback. Nothing else is reachable, not the host's loopback, not the network.
func (s *Server) handleDirectTCPIP(_ *glider.Server, conn *gossh.ServerConn, nc gossh.NewChannel, ctx glider.Context) {
	if !s.enter() {
		_ = nc.Reject(gossh.ResourceShortage, "the server is shutting down")
		return
	}
	defer s.wg.Done()
	var d directTCPIP
	if err := gossh.Unmarshal(nc.ExtraData(), &d); err != nil {
		_ = nc.Reject(gossh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	switch d.Host {
	case "127.0.0.1", "::1", "localhost":
	default:
		_ = nc.Reject(gossh.Prohibited, "hiloop forwards only to the sandbox's own loopback (127.0.0.1, ::1 or localhost), not to "+d.Host)
		return
	}
	if d.Port == 0 || d.Port > 65535 {
		_ = nc.Reject(gossh.ConnectionFailed, "invalid port "+strconv.FormatUint(uint64(d.Port), 10))
		return
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	tcp, err := s.cfg.Sandboxes.DialLoopback(dctx, sandboxOf(conn), net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port))))
	cancel()
	if err != nil {
		if stopped(err) {
			_ = nc.Reject(gossh.Prohibited, stoppedMessage(conn.User()))
		} else {
			_ = nc.Reject(gossh.ConnectionFailed, dialError(err))
		}
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		tcp.Close()
		return
	}
	relay(s, ch, reqs, tcp)
}

// dialError is the reason a forward could not connect, without the runtime's wrapping.
func dialError(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "connection timed out"
	}
	return err.Error()
}

// relay copies between ch and tcp both ways, passing each side's EOF on as a half-close, and
// closes both once both directions are done, or at once when either fails or the channel
// closes (the client closed it, or the connection died).
func relay(s *Server, ch gossh.Channel, reqs <-chan *gossh.Request, tcp net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			ch.Close()
			tcp.Close()
		})
	}
	s.goTracked(func() {
		discardRequests(reqs)
		closeBoth()
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := copyBuffered(tcp, ch); err != nil {
			closeBoth()
		} else if cw, ok := tcp.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	if _, err := copyBuffered(ch, tcp); err != nil {
		closeBoth()
	} else {
		_ = ch.CloseWrite()
	}
	wg.Wait()
	closeBoth()
}

// copyBufferSize is the chunk size of every relay. Large chunks make few, full SSH packets
// per write and few syscalls per megabyte.
const copyBufferSize = 256 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

// copyBuffered copies src to dst through a pooled buffer. It hides ReaderFrom and WriterTo,
// which would make io.CopyBuffer fall back to their own 32 KiB copies.
func copyBuffered(dst io.Writer, src io.Reader) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}
