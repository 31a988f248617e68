package client

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// stdinPipeSize is the capacity a piped stdin is given (the daemon's exec pipes' own).
const stdinPipeSize = 1 << 20

// widenPipe gives r, if it is a pipe, a capacity of stdinPipeSize (best effort; nothing else
// about it changes). A shell's pipe holds 64 KiB, so a stdin that streams was read 64 KiB a
// message, and its writer stopped at each; with 1 MiB, a read takes a whole message's worth.
func widenPipe(r io.Reader) {
	f, ok := r.(*os.File)
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
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, stdinPipeSize)
		}
	})
}
