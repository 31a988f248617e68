package client

import (
	"os"

	"golang.org/x/sys/unix"
)

// stdioPipeSize is the capacity a piped stdin or stdout is given (the daemon's exec pipes'
// own).
const stdioPipeSize = 1 << 20

// widenPipe gives s, if it is a pipe, a capacity of stdioPipeSize (best effort; nothing else
// about it changes). A shell's pipe holds 64 KiB: a stdin that streams was read 64 KiB a
// message, its writer stopping at each, and output was written 64 KiB a wakeup of its reader
// (over a remote, stdout into a pipe carried ~650 MB/s, into /dev/null ~1 GB/s).
func widenPipe(s any) {
	f, ok := s.(*os.File)
	if !ok || f == nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if unix.Fstat(int(fd), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, stdioPipeSize)
		}
	})
}
