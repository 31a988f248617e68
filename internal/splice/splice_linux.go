// Package splice moves data between descriptors with splice(2) through the runtime's poller,
// so that a copy between pipes, or between a pipe and a file, never passes through user space.
package splice

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// chunk is the most one splice call moves: a whole 1 MiB pipe's worth.
const chunk = 1 << 20

// Copy moves what src yields into dst until src's end and returns how many bytes it moved. One
// of them should be a pipe (splice's rule); where splice does not apply (a file opened
// O_APPEND, two files) Copy moves the data through a buffer instead. Either end may be
// non-blocking in the runtime's poller, or a blocking regular file, which never has to be
// waited for.
//
// drained, if not nil, is asked whenever src has nothing to read: true ends the copy there as
// at src's end. A read deadline on src that expires makes Copy ask it (and return the
// deadline's error if it says no); a write deadline on dst that expires ends the copy with
// that error.
func Copy(dst, src *os.File, drained func() bool) (int64, error) {
	s, err := newEnd(src)
	if err != nil {
		return 0, err
	}
	d, err := newEnd(dst)
	if err != nil {
		return 0, err
	}
	var (
		total  int64
		buf    []byte // set once splice is found not to apply
		eof    bool
		full   bool // dst has no room: wait for it, not for src
		opErr  error
		copied int
	)
	// move runs on src's descriptor through the poller: it moves all it can, and returns false
	// (park until src is readable) only when src is empty, which it asks poll(2) only then.
	move := func(fd uintptr) bool {
		for {
			if buf == nil {
				var n int64
				n, opErr = unix.Splice(int(fd), nil, d.fd, nil, chunk, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				copied = int(n)
				if opErr == unix.EINVAL {
					buf = make([]byte, chunk)
					continue
				}
			} else {
				copied, opErr = copyOnce(d, s, buf)
			}
			switch {
			case opErr == unix.EINTR:
				continue
			case opErr == nil && copied == 0:
				eof = true
				return true
			case opErr == nil:
				total += int64(copied)
				continue
			case opErr != unix.EAGAIN:
				return true
			}
			// EAGAIN: src is empty, or dst is full.
			if ready(int(fd), unix.POLLIN) {
				full = true
				return true
			}
			if drained != nil && drained() {
				eof = true
				return true
			}
			return false
		}
	}
	for {
		full = false
		err := s.rc.Read(move)
		switch {
		case err != nil:
			// The poller gave up on src: its deadline (or it was closed).
			if errors.Is(err, os.ErrDeadlineExceeded) && drained != nil && drained() {
				_ = src.SetReadDeadline(time.Time{})
				continue
			}
			return total, err
		case eof:
			return total, nil
		case full:
			if err := d.wait(true); err != nil {
				return total, err
			}
		case opErr != unix.EAGAIN:
			return total, opErr
		}
	}
}

// copyOnce moves up to len(buf) bytes from s to d through buf, returning EAGAIN when s has
// nothing; a full d is waited for, so that what was read is never lost.
func copyOnce(d, s end, buf []byte) (int, error) {
	n, err := unix.Read(s.fd, buf)
	if err != nil || n == 0 {
		return n, err
	}
	for off := 0; off < n; {
		m, err := unix.Write(d.fd, buf[off:n])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if err := d.wait(true); err != nil {
				return off, err
			}
			continue
		case err != nil:
			return off, err
		}
		off += m
	}
	return n, nil
}

// end is one side of a copy: its descriptor, and its raw connection for waiting on it.
type end struct {
	fd int
	rc syscall.RawConn
}

func newEnd(f *os.File) (end, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return end{}, err
	}
	e := end{fd: -1, rc: rc}
	// Not f.Fd(), which would make a non-blocking descriptor blocking. The file stays open
	// for the copy's duration, so the number stays its.
	if err := rc.Control(func(fd uintptr) { e.fd = int(fd) }); err != nil {
		return end{}, err
	}
	return e, nil
}

// wait parks until the end is writable (or readable) through the poller, or its deadline.
func (e end) wait(write bool) error {
	if write {
		return e.rc.Write(func(fd uintptr) bool { return ready(int(fd), unix.POLLOUT) })
	}
	return e.rc.Read(func(fd uintptr) bool { return ready(int(fd), unix.POLLIN) })
}

// ready says whether fd has events (or a hangup or error, which the next call reports).
func ready(fd int, events int16) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: events}}
	for {
		n, err := unix.Poll(p, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || (n > 0 && p[0].Revents != 0)
	}
}
