package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/pkg/api"
)

// connKey carries the request's connection in its context (http.Server.ConnContext), for the
// descriptors a client handed off with it.
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// execHandoff is what a local client handed the daemon for one exec (pkg/api's handoff): its
// own stdin, stdout and stderr by stream id, each a pipe of the daemon's own (non-blocking, in
// the poller), or the client's regular file or /dev/null.
type execHandoff map[byte]*os.File

// takeHandoff adopts the descriptors that came with r, as its ExecHandoffHeader names them.
// What does not match the header, or is not a pipe, a regular file or /dev/null open the
// right way, is closed and streams instead.
func takeHandoff(r *http.Request) execHandoff {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	files := handoff.Take(c)
	names := strings.Split(r.Header.Get(api.ExecHandoffHeader), ",")
	if len(files) == 0 || len(names) != len(files) {
		closeFiles(files)
		return nil
	}
	ids := map[string]byte{api.StreamNameStdin: api.StreamStdin, api.StreamNameStdout: api.StreamStdout, api.StreamNameStderr: api.StreamStderr}
	h := execHandoff{}
	for i, name := range names {
		id, ok := ids[name]
		if _, dup := h[id]; !ok || dup {
			closeFiles(files[i:])
			h.close()
			return nil
		}
		if f := adoptHandoff(files[i], id != api.StreamStdin); f != nil {
			h[id] = f
		}
	}
	return h
}

// adoptHandoff returns f as the daemon can use it to write (or read) a stream, or nil. A pipe
// is reopened: a description of the daemon's own can be non-blocking without making the
// client's blocking pipe non-blocking under it (and under whatever else shares it, such as the
// shell that ran the client). A regular file keeps the client's description, so that its
// offset moves on as the client's writes would move it; /dev/null is kept as it is too. Any
// other device is refused.
func adoptHandoff(f *os.File, write bool) *os.File {
	var (
		st unix.Stat_t
		fl int
	)
	rc, err := f.SyscallConn()
	if err == nil {
		_ = rc.Control(func(fd uintptr) {
			if err = unix.Fstat(int(fd), &st); err == nil {
				fl, err = unix.FcntlInt(fd, unix.F_GETFL, 0)
			}
		})
	}
	// The daemon uses a descriptor only the way the client opened it: a reopened pipe as well,
	// or a client could have root open for writing a named pipe it may only read.
	acc := fl & unix.O_ACCMODE
	if err != nil || (write && acc == unix.O_RDONLY) || (!write && acc == unix.O_WRONLY) {
		f.Close()
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		defer f.Close()
		flag := os.O_RDONLY
		if write {
			flag = os.O_WRONLY
		}
		var fd int
		_ = rc.Control(func(u uintptr) { fd = int(u) })
		// Without a reader (ENXIO) the client's pipe is broken already: it streams and the
		// client sees that itself.
		p, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), flag|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil
		}
		// A shell's pipe holds 64 KiB: a splice would move that much per wakeup of its reader.
		// Its capacity grows to the exec pipes' own (best effort; nothing else about it changes).
		if rc, err := p.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, handoffPipeSize) })
		}
		return p
	case unix.S_IFREG, unix.S_IFCHR:
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && !handoff.IsNull(st) {
			break
		}
		return f
	}
	f.Close()
	return nil
}

// handoffPipeSize is what a handed-off pipe is grown to, as the daemon's own exec pipes are.
const handoffPipeSize = 1 << 20

// keep drops what an exec cannot use: nothing for a TTY, no stdin unless it is forwarded.
func (h execHandoff) keep(req api.ExecRequest) {
	for id, f := range h {
		if req.TTY || (id == api.StreamStdin && !req.Stdin) {
			f.Close()
			delete(h, id)
		}
	}
}

// names lists the streams handed off, for the "started" control.
func (h execHandoff) names() []string {
	var n []string
	for _, s := range []struct {
		id   byte
		name string
	}{{api.StreamStdin, api.StreamNameStdin}, {api.StreamStdout, api.StreamNameStdout}, {api.StreamStderr, api.StreamNameStderr}} {
		if h[s.id] != nil {
			n = append(n, s.name)
		}
	}
	return slices.Clip(n)
}

// stopWhen makes waits on the handed-off pipes give up once ctx ends (the client went away,
// or the exec is over and a stdin pipe still has no writer's end in sight).
func (h execHandoff) stopWhen(ctx context.Context) {
	context.AfterFunc(ctx, func() {
		for _, f := range h {
			_ = f.SetDeadline(time.Now())
		}
	})
}

func (h execHandoff) close() {
	for _, f := range h {
		f.Close()
	}
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
