package gateway

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// waitQueued waits until c has bytes to read, or has reached its end, without holding a pipe:
// Go's splice(2) takes a pipe from its pool for a whole copy and keeps it while it waits for
// bytes, so an idle tunnel would hold two pipes (four descriptors) on top of its two sockets.
// It returns how many bytes are queued (0 at the end of the stream, or on an error the next
// read reports); a copy of that many never waits. It honours c's read deadline.
func waitQueued(c net.Conn) (int64, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return spliceChunk, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return spliceChunk, nil
	}
	var queued int
	err = rc.Read(func(fd uintptr) bool {
		n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		if err != nil {
			return true // the read reports it
		}
		if n > 0 {
			queued = n
			return true
		}
		// Nothing queued: the stream's end (or an error) reads as done, anything else waits.
		var b [1]byte
		_, _, err = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return err != unix.EAGAIN
	})
	return int64(queued), err
}
