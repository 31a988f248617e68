//go:build linux

package runtime

import (
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ttyInput is the input of a process on a PTY: what is written goes to the master, and Close
// ends the input as a pipe's end would, with the terminal's EOF character (VEOF, ^D unless the
// program changed it), which is the only end of input a terminal has: closing the master would
// hang the terminal up instead.
//
// One ^D typed at Close is not enough. A program that takes the terminal out of canonical mode
// after the input ended (bash's line editor, as it starts) reads a ^D typed before that as a
// NUL: canonical mode stores it as an empty line's end, which raw mode then hands out as a byte.
// And a ^D after a last line without a newline only sends that line. So, from Close until the
// process ends, the EOF character is typed whenever the terminal holds no input for its reader:
// a reader in canonical mode gets the end of input at every read, as from a closed pipe; one
// in raw mode, which takes ^D as a key, gets at most rawEOFs of them (readline takes one on an
// empty line as the end; a full-screen editor just gets a few keys).
type ttyInput struct {
	master *os.File
	done   <-chan struct{} // closed when the process has ended
	once   sync.Once
}

// rawEOFs is how many ^D keys a program reading the terminal raw gets after the input ended.
const rawEOFs = 3

// How often the terminal is looked at after the input ended: often at first, then less while
// nothing changes (a program that does not read its input at all).
const (
	eofPollMin = 5 * time.Millisecond
	eofPollMax = 200 * time.Millisecond
)

func (t *ttyInput) Write(b []byte) (int, error) { return t.master.Write(b) }

// Close ends the input; typing the end goes on in the background until the process ends.
func (t *ttyInput) Close() error {
	t.once.Do(func() { go t.typeEOF() })
	return nil
}

func (t *ttyInput) typeEOF() {
	interval, raws := eofPollMin, 0
	for {
		st, err := t.state()
		if errors.Is(err, errNoPeer) {
			// A kernel without TIOCGPTPEER (before 4.13): one ^D, as a keyboard would type it.
			_, _ = t.master.Write([]byte{st.eof})
			return
		}
		if err != nil {
			return // the terminal is gone, or hung up: the process is ending
		}
		if !st.waiting && (!st.raw || raws < rawEOFs) {
			if st.raw {
				raws++
			}
			if _, err := t.master.Write([]byte{st.eof}); err != nil {
				return
			}
			interval = eofPollMin
		} else {
			interval = min(2*interval, eofPollMax)
		}
		select {
		case <-t.done:
			return
		case <-time.After(interval):
		}
	}
}

// ttyState is what typeEOF needs to know of the terminal.
type ttyState struct {
	waiting bool // input waits for the reader: an unread line, bytes, or an EOF
	raw     bool // not in canonical mode: ^D is a key, not the end of input
	eof     byte // the EOF character
}

// errNoPeer says the kernel cannot open a PTY's other end from its master.
var errNoPeer = errors.New("runtime: no TIOCGPTPEER")

// state opens the terminal's other end for a moment (TIOCGPTPEER: no path, so nothing in the
// sandbox can put another file in its place) and asks it whether input waits for the reader.
// The line discipline's poll pushes what was written to the master through first, so a ^D
// typed just before is seen. The end opened never becomes anyone's controlling terminal and is
// closed at once: held, it would keep the master from seeing the hangup at the process's exit.
func (t *ttyInput) state() (ttyState, error) {
	st := ttyState{eof: 4}
	rc, err := t.master.SyscallConn()
	if err != nil {
		return st, err
	}
	peer, ioctlErr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		if tio, err := unix.IoctlGetTermios(int(fd), unix.TCGETS); err == nil && tio.Cc[unix.VEOF] != 0 {
			st.eof = tio.Cc[unix.VEOF] // the master's termios ioctls are the terminal's
		}
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.TIOCGPTPEER, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC)
		if errno != 0 {
			ioctlErr = errno
			return
		}
		peer = int(r)
	}); err != nil {
		return st, err
	}
	if errors.Is(ioctlErr, unix.EINVAL) || errors.Is(ioctlErr, unix.ENOTTY) {
		return st, errNoPeer
	}
	if ioctlErr != nil {
		return st, ioctlErr
	}
	defer unix.Close(peer)
	tio, err := unix.IoctlGetTermios(peer, unix.TCGETS)
	if err != nil {
		return st, err
	}
	st.raw = tio.Lflag&unix.ICANON == 0
	fds := []unix.PollFd{{Fd: int32(peer), Events: unix.POLLIN}}
	for {
		_, err = unix.Poll(fds, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return st, err
	}
	if fds[0].Revents&unix.POLLIN == 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
		return st, errors.New("runtime: the terminal hung up")
	}
	st.waiting = fds[0].Revents&unix.POLLIN != 0
	return st, nil
}
