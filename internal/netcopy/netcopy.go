// Package netcopy joins two stream connections, the way a port forward carries a TCP stream:
// both directions at once, each end told when the other has finished sending (a half-close),
// and the kernel's splice used where both ends are sockets Go can splice between.
package netcopy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
)

// closeWriter is a connection that can say it sends no more while it still reads.
type closeWriter interface{ CloseWrite() error }

// Join copies a to b and b to a until both directions have ended, then closes both. It returns
// the bytes copied each way and the first error that was not an ordinary end (EOF, or a
// connection closed because the other direction ended in error).
func Join(a, b net.Conn) (aToB, bToA int64, err error) {
	var wg sync.WaitGroup
	var errA, errB error
	wg.Add(2)
	go func() {
		defer wg.Done()
		aToB, errA = copyHalf(b, a)
	}()
	go func() {
		defer wg.Done()
		bToA, errB = copyHalf(a, b)
	}()
	wg.Wait()
	a.Close()
	b.Close()
	return aToB, bToA, errors.Join(ordinary(errA), ordinary(errB))
}

// copyHalf copies src to dst, then half-closes dst, or closes both when it cannot (so that the
// other direction ends too rather than waiting forever).
func copyHalf(dst, src net.Conn) (int64, error) {
	n, err := io.Copy(dst, src)
	if cw, ok := dst.(closeWriter); ok && err == nil {
		if cw.CloseWrite() == nil {
			return n, nil
		}
	}
	dst.Close()
	src.Close()
	return n, err
}

// unixSendBuffer is the send buffer a unix socket carrying a forwarded stream asks for. A unix
// stream socket holds at most its sender's buffer in flight; with the default ~208 KiB, a
// forward that copies at gigabytes a second wakes both ends for every few hundred KiB, and
// carried half the loopback's rate here. The kernel caps it at net.core.wmem_max, as TCP's
// own buffers are capped by their sysctls.
const unixSendBuffer = 4 << 20

// Bare returns the connection under c's wrappers (those with a NetConn method, such as a
// listener's that counts connections or keeps what arrives with the data): the socket itself,
// which is what Go's copies recognise to splice, and what WidenUnix can widen. It stops at a
// TLS connection, whose NetConn carries the records, not the data.
func Bare(c net.Conn) net.Conn {
	for {
		if _, ok := c.(*tls.Conn); ok {
			return c
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}

// WidenUnix gives c, if it is a unix socket (under any wrappers), the send buffer of a
// forwarded stream; other connections keep theirs (TCP tunes its own).
func WidenUnix(c net.Conn) {
	if u, ok := Bare(c).(*net.UnixConn); ok {
		_ = u.SetWriteBuffer(unixSendBuffer)
	}
}

func ordinary(err error) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
