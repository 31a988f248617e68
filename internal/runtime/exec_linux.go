//go:build linux

package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/runtime/initproc"
	"github.com/hiloop/hiloop/internal/splice"
)

// drainDelay is how long Wait lets output flow after the exit status arrived; a background
// process that keeps the stdout pipe open must not hold an exec open.
const drainDelay = 100 * time.Millisecond

// Exec starts p in the running sandbox id. ctx bounds starting the process only. The process
// writes straight into pipes (or a PTY) this process holds; nothing relays the output.
//
// A command that cannot be started (not found, not executable, bad Dir or User) is not an
// error here: like a shell, the Process prints the reason on its stderr (stdout with a TTY)
// and Wait reports exit code 127 (not found) or 126.
func (r *Runtime) Exec(ctx context.Context, id string, p ExecSpec) (Process, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return nil, errors.New("runtime: exec: empty command")
	}
	conn, err := r.dial(ctx, id)
	if err != nil {
		return nil, err
	}
	proc, err := startExec(ctx, conn, p)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return proc, nil
}

func startExec(ctx context.Context, conn *initproc.Conn, p ExecSpec) (*process, error) {
	// Until the init answered, ctx cancels the exchange.
	stopWatch := watchContext(ctx, conn)
	defer stopWatch()

	req := &initproc.Message{Op: initproc.OpExec, Exec: &initproc.ExecRequest{
		Argv: p.Argv, Env: p.Env, Dir: p.Dir, User: p.User, TTY: p.TTY, Rows: p.Rows, Cols: p.Cols,
	}}
	proc := &process{conn: conn, tty: p.TTY, done: make(chan struct{})}
	var remote []*os.File
	if !p.TTY {
		var local [3]*os.File
		for i := range 3 {
			l, rm, err := pipe(i != 0)
			if err != nil {
				closeFiles(local[:])
				closeFiles(remote)
				return nil, fmt.Errorf("runtime: exec: %w", err)
			}
			local[i] = l
			remote = append(remote, rm)
		}
		proc.stdin = local[0]
		proc.stdout = newOutStream(local[1], false)
		proc.stderr = newOutStream(local[2], false)
	}
	cleanup := func() {
		closeFiles(remote)
		if proc.stdin != nil {
			proc.stdin.Close()
		}
		proc.stdout.close()
		proc.stderr.close()
	}
	err := conn.Send(req, remote...)
	closeFiles(remote) // the init has its own copies now
	remote = nil
	if err != nil {
		cleanup()
		return nil, handshakeError(ctx, err)
	}
	var m initproc.Message
	files, err := conn.Recv(&m)
	if err != nil {
		cleanup()
		return nil, handshakeError(ctx, err)
	}
	switch m.Op {
	case initproc.OpStarted:
		proc.pid = m.Pid
		if p.TTY {
			if len(files) != 1 {
				closeFiles(files)
				cleanup()
				return nil, fmt.Errorf("runtime: exec: init sent %d files for a TTY, want 1", len(files))
			}
			master, err := pollable(files[0])
			if err != nil {
				cleanup()
				return nil, fmt.Errorf("runtime: exec: %w", err)
			}
			proc.stdin = master
			proc.ttyIn = &ttyInput{master: master, done: proc.done}
			proc.stdout = newOutStream(master, true)
		} else {
			closeFiles(files)
		}
		stopWatch()
		_ = conn.UnixConn().SetDeadline(time.Time{})
		go proc.watch()
	case initproc.OpExit:
		// Could not start: the reason goes where a shell would print it.
		closeFiles(files)
		proc.status = ExitStatus{Code: m.Code, Signal: m.Signal}
		proc.exited.Store(true)
		close(proc.done)
		conn.Close()
		if m.Error != "" {
			if p.TTY {
				proc.stdout = newFailedStream(m.Error + "\r\n")
			} else {
				proc.stderr.prefix = []byte(m.Error + "\n")
			}
		}
		if p.TTY && proc.stdout == nil {
			proc.stdout = newFailedStream("")
		}
	default:
		closeFiles(files)
		cleanup()
		return nil, fmt.Errorf("runtime: exec: unexpected reply %q", m.Op)
	}
	return proc, nil
}

// watchContext expires conn's deadline when ctx is done, until the returned func is called;
// once that returned, the watch is over for sure.
func watchContext(ctx context.Context, conn *initproc.Conn) func() {
	if ctx.Done() == nil {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-ctx.Done():
			_ = conn.UnixConn().SetDeadline(time.Unix(1, 0))
		case <-stop:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-finished
		})
	}
}

func handshakeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) || errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
		return ErrNotRunning // the init went away between dial and reply
	}
	return fmt.Errorf("runtime: exec: %w", err)
}

// execPipeSize is the capacity of an exec's stdio pipes. The kernel allocates their pages as
// data is written, charged to the writer's memory cgroup.
const execPipeSize = 1 << 20

// pipe returns a pipe as (our end, the process's end). Our end is non-blocking and pollable;
// the process's end stays blocking, as programs expect of their stdio.
func pipe(localReads bool) (local, remote *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	l, rm := fds[1], fds[0]
	if localReads {
		l, rm = fds[0], fds[1]
	}
	if err := unix.SetNonblock(l, true); err != nil {
		unix.Close(l)
		unix.Close(rm)
		return nil, nil, err
	}
	// A larger pipe lets the command run ahead while the daemon sends a chunk, and lets a read
	// take a whole chunk (internal/daemon's execChunk): with the default 64 KiB, a fast writer
	// and the daemon wake each other for every 64 KiB. Best effort: the default still works.
	_, _ = unix.FcntlInt(uintptr(l), unix.F_SETPIPE_SZ, execPipeSize)
	return os.NewFile(uintptr(l), "pipe"), os.NewFile(uintptr(rm), "pipe"), nil
}

// pollable makes a received fd non-blocking and registers it with the runtime poller.
func pollable(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "pty"), nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// process is a running exec, implementing Process.
type process struct {
	conn   *initproc.Conn
	tty    bool
	pid    int
	stdin  *os.File  // a pipe, or the PTY master
	ttyIn  *ttyInput // the input of the PTY master
	stdout *outStream
	stderr *outStream // nil with a TTY

	done   chan struct{} // closed when the exit arrived or the init went away
	exited atomic.Bool
	died   bool // written before done is closed
	status ExitStatus

	waitOnce sync.Once
}

func (p *process) watch() {
	defer close(p.done)
	for {
		var m initproc.Message
		files, err := p.conn.Recv(&m)
		closeFiles(files)
		if err != nil {
			p.died = true
			return
		}
		if m.Op == initproc.OpExit {
			p.status = ExitStatus{Code: m.Code, Signal: m.Signal}
			p.exited.Store(true)
			return
		}
	}
}

func (p *process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nopWriteCloser{io.Discard}
	}
	if p.tty {
		return p.ttyIn
	}
	return p.stdin
}

func (p *process) Stdout() io.Reader { return p.stdout }

func (p *process) Stderr() io.Reader {
	if p.stderr == nil {
		return nil
	}
	return p.stderr
}

func (p *process) Resize(rows, cols uint16) error {
	if !p.tty || p.stdin == nil {
		return errors.New("runtime: resize: not a TTY process")
	}
	rc, err := p.stdin.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return fmt.Errorf("runtime: resize: %w", err)
	}
	if ierr != nil {
		return fmt.Errorf("runtime: resize: %w", ierr)
	}
	return nil
}

func (p *process) Signal(sig int) error {
	if p.exited.Load() || p.isDone() {
		return os.ErrProcessDone
	}
	if err := p.conn.Send(&initproc.Message{Op: initproc.OpSignal, Signal: sig}); err != nil {
		return fmt.Errorf("runtime: signal: %w", err)
	}
	return nil
}

func (p *process) Kill() error {
	if p.exited.Load() || p.isDone() {
		return nil
	}
	if err := p.conn.Send(&initproc.Message{Op: initproc.OpKill}); err != nil && !p.isDone() {
		return fmt.Errorf("runtime: kill: %w", err)
	}
	return nil
}

func (p *process) isDone() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the exit, then for the output to reach EOF for at most drainDelay; after
// that, readers get what is buffered and then EOF, and never block again.
func (p *process) Wait() (ExitStatus, error) {
	p.waitOnce.Do(func() {
		<-p.done
		expired := make(chan struct{})
		timer := time.AfterFunc(drainDelay, func() { close(expired) })
		defer timer.Stop()
		for _, s := range []*outStream{p.stdout, p.stderr} {
			if s == nil {
				continue
			}
			select {
			case <-s.eof:
			case <-expired:
			}
			s.drain()
		}
		if !p.tty && p.stdin != nil {
			p.stdin.Close()
		}
		p.conn.Close()
	})
	if p.died {
		return ExitStatus{}, ErrSandboxDied
	}
	return p.status, nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// outStream reads a pipe or PTY master. It turns the PTY's EIO at hangup into EOF and, once
// draining, returns EOF when nothing is buffered instead of blocking.
type outStream struct {
	f        *os.File // nil: only prefix
	rc       syscall.RawConn
	tty      bool
	prefix   []byte // returned before f's data (a start failure's message)
	draining atomic.Bool
	eof      chan struct{}
	eofOnce  sync.Once
	mu       sync.Mutex // one reader at a time
}

func newOutStream(f *os.File, tty bool) *outStream {
	s := &outStream{f: f, tty: tty, eof: make(chan struct{})}
	if rc, err := f.SyscallConn(); err == nil {
		s.rc = rc
	}
	return s
}

func newFailedStream(msg string) *outStream {
	return &outStream{prefix: []byte(msg), eof: make(chan struct{})}
}

func (s *outStream) Read(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.prefix) > 0 {
		n := copy(b, s.prefix)
		s.prefix = s.prefix[n:]
		return n, nil
	}
	if s.f == nil || s.rc == nil {
		s.close()
		return 0, io.EOF
	}
	for {
		var (
			n    int
			rerr error
		)
		err := s.rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = unix.Read(int(fd), b)
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				if s.draining.Load() {
					n, rerr = 0, io.EOF
					return true
				}
				return false
			}
			return true
		})
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && s.draining.Load() {
				// Drain woke us up; read what is buffered without waiting.
				_ = s.f.SetReadDeadline(time.Time{})
				continue
			}
			s.close()
			return 0, io.EOF // closed under us
		}
		if rerr != nil {
			if rerr == io.EOF || (s.tty && rerr == unix.EIO) {
				s.close()
				return 0, io.EOF
			}
			return 0, rerr
		}
		if n == 0 {
			s.close()
			return 0, io.EOF
		}
		return n, nil
	}
}

// WriteTo moves the stream into w until its end. Into a file (a client's own pipe or file,
// handed off to the daemon) it splices, so the bytes never pass through user space; a
// destination that fails closes the stream, so the command's next write fails as it would
// writing into a broken pipe of its own.
func (s *outStream) WriteTo(w io.Writer) (int64, error) {
	dst, ok := w.(*os.File)
	if !ok || s.f == nil || s.tty {
		return io.Copy(w, struct{ io.Reader }{s})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var total int64
	if len(s.prefix) > 0 {
		n, err := dst.Write(s.prefix)
		total += int64(n)
		s.prefix = nil
		if err != nil {
			s.close()
			return total, err
		}
	}
	n, err := splice.Copy(dst, s.f, s.draining.Load)
	total += n
	s.close()
	return total, err
}

// drain makes readers stop waiting for new data.
func (s *outStream) drain() {
	if s.draining.Swap(true) {
		return
	}
	if s.f != nil {
		_ = s.f.SetReadDeadline(time.Now())
	}
}

// close marks EOF and releases the file.
func (s *outStream) close() {
	if s == nil {
		return
	}
	s.eofOnce.Do(func() {
		close(s.eof)
		if s.f != nil {
			s.f.Close()
		}
	})
}
