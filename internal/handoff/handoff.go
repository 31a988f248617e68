// Package handoff passes a client's own stdio descriptors to sandboxd over the daemon's unix
// socket (SCM_RIGHTS), so that an exec's data can move between the command's pipes and the
// client's pipes or files without passing through the client. The descriptors ride with the
// first bytes of the client's HTTP request; the daemon's listener keeps what arrives on each
// connection until a handler takes it.
//
// The daemon never gives these descriptors to a sandbox: it splices between them and the
// command's pipes itself. Over TCP, or a socket forwarded by something that drops control
// messages, nothing arrives and the exec streams as it would without a handoff.
package handoff

import (
	"net"
	"os"
)

// MaxFiles is the most descriptors one connection passes: stdin, stdout and stderr.
const MaxFiles = 3

// Take returns the descriptors that arrived on c (a connection of a Listen listener, possibly
// wrapped by types with a NetConn method) and forgets them: the caller owns them now. It
// returns nil when nothing arrived or c is not such a connection.
func Take(c net.Conn) []*os.File {
	for c != nil {
		if hc, ok := c.(*conn); ok {
			return hc.take()
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}
