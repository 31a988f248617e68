package sshd

import (
	"net"

	"golang.org/x/sys/unix"
)

// quickAck makes the kernel acknowledge the next segments of c at once, not after the delayed
// ACK timeout. The kernel drops back to delayed ACKs by itself, so it is set before each read.
func quickAck(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	if rc, err := tc.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
		})
	}
}
