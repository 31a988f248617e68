//go:build unix

package handoff

import (
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Listen wraps ln so that the descriptors clients send on its unix connections are kept for
// Take. Other connections pass through unchanged.
func Listen(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if uc, ok := c.(*net.UnixConn); ok && err == nil {
		return &conn{UnixConn: uc, oob: make([]byte, unix.CmsgSpace(4*MaxFiles))}, nil
	}
	return c, err
}

// conn reads with recvmsg so that descriptors sent with the data are received, not lost.
type conn struct {
	*net.UnixConn

	oob   []byte // one read at a time, as net.Conn promises
	mu    sync.Mutex
	files []*os.File
}

func (c *conn) Read(b []byte) (int, error) {
	n, oobn, _, _, err := c.ReadMsgUnix(b, c.oob)
	if oobn > 0 {
		c.keep(c.oob[:oobn])
	}
	// ReadMsgUnix passes on recvmsg's -1 with an error (a deadline, a reset); Read must not:
	// a bufio.Reader panics at a negative count.
	return max(n, 0), err
}

// keep adopts the descriptors in a control message. A client that sends more than MaxFiles,
// or sends again, replaces what it sent before: at most MaxFiles are held per connection (the
// kernel closes those that do not fit the control buffer).
func (c *conn) keep(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	var got []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			got = append(got, os.NewFile(uintptr(fd), "handoff"))
		}
	}
	if len(got) > MaxFiles {
		closeAll(got[MaxFiles:])
		got = got[:MaxFiles]
	}
	c.mu.Lock()
	old := c.files
	c.files = got
	c.mu.Unlock()
	closeAll(old)
}

// NetConn returns the socket itself, for copies that splice: what a handler reads after it
// took the descriptors (a hijacked stream's data) needs no control buffer.
func (c *conn) NetConn() net.Conn { return c.UnixConn }

func (c *conn) take() []*os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.files
	c.files = nil
	return f
}

func (c *conn) Close() error {
	closeAll(c.take())
	return c.UnixConn.Close()
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Send returns c such that its first write carries files along (SCM_RIGHTS). c must be a unix
// connection; anything else is returned as it is, and nothing is sent. The files stay the
// caller's: the kernel gives the daemon descriptors of its own.
func Send(c net.Conn, files []*os.File) net.Conn {
	uc, ok := c.(*net.UnixConn)
	if !ok || len(files) == 0 {
		return c
	}
	fds := make([]int, 0, len(files))
	for _, f := range files {
		// Not f.Fd(), which would switch a non-blocking descriptor to blocking.
		rc, err := f.SyscallConn()
		if err != nil {
			return c
		}
		_ = rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) })
	}
	if len(fds) != len(files) {
		return c
	}
	return &sendConn{UnixConn: uc, rights: unix.UnixRights(fds...)}
}

type sendConn struct {
	*net.UnixConn

	once   sync.Once
	rights []byte
}

func (c *sendConn) Write(b []byte) (int, error) {
	var (
		n    int
		err  error
		sent bool
	)
	c.once.Do(func() {
		sent = true
		var oobn int
		n, oobn, err = c.WriteMsgUnix(b, c.rights, nil)
		if err == nil && oobn != len(c.rights) {
			err = unix.EMSGSIZE
		}
	})
	if !sent {
		return c.UnixConn.Write(b)
	}
	if err == nil && n < len(b) {
		// The rest of a short first write goes as plain data.
		var m int
		m, err = c.UnixConn.Write(b[n:])
		n += m
	}
	return n, err
}

// Eligible says whether f can be handed off: a pipe, a regular file or /dev/null. A terminal
// never is: it stays with the client, which owns its modes and its window.
func Eligible(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var st unix.Stat_t
	if cerr := rc.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) }); cerr != nil || err != nil {
		return false
	}
	typ := st.Mode & unix.S_IFMT
	return typ == unix.S_IFIFO || typ == unix.S_IFREG || IsNull(st)
}

// IsNull says whether st is /dev/null's.
func IsNull(st unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && uint64(st.Rdev) == unix.Mkdev(1, 3)
}
