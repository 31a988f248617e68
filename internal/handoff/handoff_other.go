//go:build !unix

package handoff

import (
	"net"
	"os"
)

// Listen returns ln: without unix sockets' control messages nothing is handed off.
func Listen(ln net.Listener) net.Listener { return ln }

// Send returns c: nothing can be sent along on this system.
func Send(c net.Conn, _ []*os.File) net.Conn { return c }

type conn struct{ net.Conn }

func (*conn) take() []*os.File { return nil }

// Eligible is false: nothing is handed off on this system.
func Eligible(*os.File) bool { return false }
