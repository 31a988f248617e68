//go:build linux

package initproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The exec protocol runs over a SOCK_SEQPACKET unix socket: one JSON object per packet, so the
// kernel keeps message boundaries and each packet carries its own SCM_RIGHTS file descriptors.
// One connection serves one request: a ping, or one exec and the messages about it.
//
//	daemon → init   {"op":"ping"}                           init → {"op":"pong"}
//	daemon → init   {"op":"exec","exec":{...}} + 3 fds       (non-TTY: stdin, stdout, stderr)
//	                {"op":"exec","exec":{...,"tty":true}}    (no fds)
//	init → daemon   {"op":"started","pid":N} [+ PTY master fd]   or   {"op":"exit","code":127,"error":"..."}
//	daemon → init   {"op":"signal","signal":N} | {"op":"kill"}
//	init → daemon   {"op":"exit","code":C,"signal":S}
//
// If the daemon's connection drops before the exit is sent, the init kills the exec's session.

// Network is the socket type of the init's listening socket.
const Network = "unixpacket"

// MaxMessage bounds one packet (an exec request with a large environment is the biggest).
const MaxMessage = 1 << 20

const maxFDs = 3

// Ops of Message.
const (
	OpPing    = "ping"
	OpPong    = "pong"
	OpExec    = "exec"
	OpStarted = "started"
	OpSignal  = "signal"
	OpKill    = "kill"
	OpExit    = "exit"
)

// Message is every packet of the protocol; Op says which fields matter.
type Message struct {
	Op string `json:"op"`
	// Exec is the request of an OpExec.
	Exec *ExecRequest `json:"exec,omitempty"`
	// Pid is the started process's pid inside the sandbox (OpStarted).
	Pid int `json:"pid,omitempty"`
	// Signal is the signal to send (OpSignal) or the signal that ended the process (OpExit).
	Signal int `json:"signal,omitempty"`
	// Code is the exit code (OpExit).
	Code int `json:"code,omitempty"`
	// Error says why the process could not be started (OpExit without OpStarted before it).
	Error string `json:"error,omitempty"`
}

// ExecRequest describes one process to start; see runtime.ExecSpec.
type ExecRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	User string   `json:"user,omitempty"`
	TTY  bool     `json:"tty,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
}

// Conn is one protocol connection. Send is safe for concurrent use; Recv is not.
type Conn struct {
	c   *net.UnixConn
	wmu sync.Mutex
}

// NewConn wraps an established unixpacket connection.
func NewConn(c *net.UnixConn) *Conn { return &Conn{c: c} }

// UnixConn returns the underlying connection (for deadlines and Close).
func (c *Conn) UnixConn() *net.UnixConn { return c.c }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Send writes m as one packet, passing files along with it.
func (c *Conn) Send(m *Message, files ...*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("message too large: %d bytes (limit %d)", len(b), MaxMessage)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(b) > 64<<10 {
		c.growSendBuffer(2 * len(b))
	}
	_, _, err = c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// growSendBuffer lets one packet of n bytes through: a unix packet must fit the sender's
// buffer whole (about 200 KB by default). Root may exceed net.core.wmem_max; others get what
// SO_SNDBUF allows.
func (c *Conn) growSendBuffer(n int) {
	rc, err := c.c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, n)
		}
	})
}

// Recv reads one packet into m and returns the files that came with it (the caller owns them).
// At the peer's close it returns io.EOF.
func (c *Conn) Recv(m *Message) ([]*os.File, error) {
	rc, err := c.c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var (
		n, oobn int
		buf     []byte
		oob     = make([]byte, unix.CmsgSpace(4*maxFDs))
		rerr    error
	)
	err = rc.Read(func(fd uintptr) bool {
		// Peek at the packet's size first so a large request needs no fixed large buffer.
		size, _, _, _, e := unix.Recvmsg(int(fd), nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		if e != nil {
			rerr = e
			return true
		}
		if size == 0 {
			rerr = io.EOF
			return true
		}
		if size > MaxMessage {
			rerr = fmt.Errorf("message too large: %d bytes", size)
			return true
		}
		buf = make([]byte, size)
		n, oobn, _, _, e = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		rerr = e
		return true
	})
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		if errors.Is(rerr, unix.ECONNRESET) {
			return nil, io.EOF
		}
		return nil, rerr
	}
	files, err := parseRights(oob[:oobn])
	if err != nil {
		return nil, err
	}
	if n == 0 {
		closeAll(files)
		return nil, io.EOF
	}
	if err := json.Unmarshal(buf[:n], m); err != nil {
		closeAll(files)
		return nil, fmt.Errorf("bad message: %w", err)
	}
	return files, nil
}

func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
