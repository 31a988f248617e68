// Package netcopy joins two stream connections, the way a port forward carries a TCP stream:
// both directions at once, each end told when the other has finished sending (a half-close),
// and the kernel's splice used where both ends are sockets Go can splice between.
package netcopy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
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
	var n int64
	var err error
	switch {
	case isTLS(src):
		n, err = copyFromTLS(dst, src)
	case isTLS(dst):
		// Reads as large as a TLS write can take whole: Go's own copy from a socket reads
		// 32 KiB at a time.
		n, err = io.CopyBuffer(heldWriter{dst}, onlyReader{src}, make([]byte, tlsCopyBuffer))
	default:
		n, err = io.Copy(dst, src)
	}
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

// readBufferSize is what one read of a ReadBuffered connection takes from the socket at most.
const readBufferSize = 256 << 10

// readBufferFrom is the size of a read that makes a ReadBuffered connection allocate its
// buffer: TLS asks for a large read only to receive a large record, which a stream sends; the
// short records of API requests and answers are read straight, at no memory cost.
const readBufferFrom = 8 << 10

// ReadBuffered returns c reading through a buffer that takes what the socket holds, up to 256
// KiB a syscall, once the connection carries large reads: for a TLS connection's socket (it is
// made for tls.Client or tls.Server). Go's TLS reads a record or two a syscall, so a stream
// over TLS paid a read, and mostly a wait in the poller and a wakeup, for every 16 KiB record;
// with the buffer a stream's records arrive many at a time. NetConn returns c.
func ReadBuffered(c net.Conn) net.Conn { return &readBuffered{Conn: c} }

type readBuffered struct {
	net.Conn
	buf        []byte
	start, end int
	err        error // the socket's, once what is buffered has been read

	wmu   sync.Mutex
	holds int    // HoldWrites not yet released
	wbuf  []byte // the writes held
}

// holdBuffer is the most a hold gathers before it writes: a 256 KiB message's records.
const holdBuffer = 320 << 10

// HoldWrites gathers the writes to the socket under c, a TLS connection whose socket is
// ReadBuffered, until the release it returns, which writes them as one (and returns that
// write's error). Go's TLS writes each record of a large write with a syscall of its own, 16
// KiB each, over loopback a trip through the network stack and a wakeup of the reader each.
// A write made meanwhile by another writer (a keepalive, an acknowledgement) waits in the
// batch; one that comes with no hold goes straight out. For any other connection, release
// does nothing.
func HoldWrites(c net.Conn) (release func() error) {
	for {
		if tc, ok := c.(*tls.Conn); ok {
			if r, ok := tc.NetConn().(*readBuffered); ok {
				r.hold()
				return r.release
			}
			return func() error { return nil }
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return func() error { return nil }
		}
		c = u.NetConn()
	}
}

func (r *readBuffered) hold() {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.holds++
	if r.wbuf == nil {
		r.wbuf = make([]byte, 0, holdBuffer)
	}
}

func (r *readBuffered) release() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.holds--; r.holds > 0 {
		return nil
	}
	return r.flush()
}

func (r *readBuffered) flush() error {
	if len(r.wbuf) == 0 {
		return nil
	}
	_, err := r.Conn.Write(r.wbuf)
	r.wbuf = r.wbuf[:0]
	return err
}

func (r *readBuffered) Write(p []byte) (int, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.holds == 0 {
		if err := r.flush(); err != nil {
			return 0, err
		}
		return r.Conn.Write(p)
	}
	if len(r.wbuf)+len(p) > cap(r.wbuf) {
		if err := r.flush(); err != nil {
			return 0, err
		}
		if len(p) > cap(r.wbuf) {
			return r.Conn.Write(p)
		}
	}
	r.wbuf = append(r.wbuf, p...)
	return len(p), nil
}

func (r *readBuffered) Read(p []byte) (int, error) {
	if r.start < r.end {
		n := copy(p, r.buf[r.start:r.end])
		r.start += n
		return n, nil
	}
	if r.err != nil {
		err := r.err
		r.err = nil
		return 0, err
	}
	if r.buf == nil && len(p) < readBufferFrom || len(p) >= readBufferSize {
		return r.Conn.Read(p)
	}
	if r.buf == nil {
		r.buf = make([]byte, readBufferSize)
	}
	n, err := r.Conn.Read(r.buf)
	m := copy(p, r.buf[:n])
	r.start, r.end = m, n
	if m < n && err != nil {
		r.err, err = err, nil
	}
	return m, err
}

// NetConn is the connection under the buffer.
func (r *readBuffered) NetConn() net.Conn { return r.Conn }

// Unbuffered returns the connection under ReadBuffered's buffer, or c itself.
func Unbuffered(c net.Conn) net.Conn {
	if r, ok := c.(*readBuffered); ok {
		return r.Conn
	}
	return c
}

// ReadBufferedListener is ln with its connections ReadBuffered: a TLS listener's socket.
func ReadBufferedListener(ln net.Listener) net.Listener { return readBufferedListener{ln} }

type readBufferedListener struct{ net.Listener }

func (l readBufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return ReadBuffered(c), nil
}

// tlsCopyBuffer is the buffer of a copy into or out of a TLS connection.
const tlsCopyBuffer = 256 << 10

// maxRecord is the most data one TLS record carries.
const maxRecord = 16 << 10

func isTLS(c net.Conn) bool {
	_, ok := c.(*tls.Conn)
	return ok
}

// heldWriter writes to a TLS connection with its records' writes held (HoldWrites).
type heldWriter struct{ c net.Conn }

func (w heldWriter) Write(p []byte) (int, error) {
	release := HoldWrites(w.c)
	n, err := w.c.Write(p)
	if rerr := release(); err == nil {
		err = rerr
	}
	return n, err
}

type onlyReader struct{ io.Reader }

// copyFromTLS copies src, a TLS connection, to dst. A TLS read returns one record, 16 KiB at
// most; writing each on its own cost a syscall, and a wakeup of the reader at the other end,
// per record. After a read, the records that have already arrived are taken too, without
// waiting for more (a read deadline in the past makes a read that would wait return at once;
// Go's TLS keeps its state through such a timeout), and written out together.
func copyFromTLS(dst, src net.Conn) (int64, error) {
	buf := make([]byte, tlsCopyBuffer)
	var written int64
	for {
		n, err := src.Read(buf)
		if n > 0 && err == nil && n < len(buf)-maxRecord {
			if src.SetReadDeadline(aLongTimeAgo) == nil {
				for n < len(buf)-maxRecord {
					m, rerr := src.Read(buf[n:])
					n += m
					if rerr != nil {
						if !errors.Is(rerr, os.ErrDeadlineExceeded) {
							err = rerr
						}
						break
					}
				}
				if derr := src.SetReadDeadline(time.Time{}); derr != nil && err == nil {
					err = derr
				}
			}
		}
		if n > 0 {
			m, werr := dst.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, werr
			}
		}
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, err
		}
	}
}

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)
