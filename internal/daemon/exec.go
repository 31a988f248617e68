package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/execflow"
	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/splice"
	"github.com/hiloop/hiloop/pkg/api"
)

// execSandbox serves the exec WebSocket (the protocol is described in pkg/api/exec.go).
func (d *Daemon) execSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	// Refuse before the upgrade where we can, so a plain HTTP error reaches the client. The
	// record says enough: probing the init as `sandbox get` does cost more than the exec itself,
	// and an init found gone by the exec fails it the same way.
	handed := takeHandoff(r)
	if err := d.sandboxes.CheckExec(name); err != nil {
		handed.close()
		return err
	}
	sw := &streamWriter{ResponseWriter: w}
	conn, err := websocket.Accept(sw, r, nil)
	if err != nil {
		handed.close()
		return nil // Accept has answered the client already
	}
	defer conn.CloseNow()
	conn.SetReadLimit(api.MaxBodyBytes)
	ctx := r.Context()

	s := &execStream{conn: conn, raw: sw.conn}
	exit, err := d.runExec(ctx, name, s, handed)
	if err != nil {
		var apiErr *api.Error
		if !errors.As(err, &apiErr) {
			d.log.Error("exec", "sandbox", name, "err", err)
			apiErr = api.Errorf(api.CodeInternal, "exec: %v", err)
		}
		s.control(ctx, api.ExecControl{Type: api.ControlError, Error: apiErr})
	} else {
		s.control(ctx, exit)
	}
	conn.Close(websocket.StatusNormalClosure, "")
	return nil
}

// runExec reads the request, runs the process and pumps its streams until it ends. It owns
// handed: each file is closed by the pump that uses it, or here.
func (d *Daemon) runExec(ctx context.Context, name string, s *execStream, handed execHandoff) (api.ExecControl, error) {
	closeHanded := true
	defer func() {
		if closeHanded {
			handed.close()
		}
	}()
	typ, data, err := s.conn.Read(ctx)
	if err != nil {
		// The client's: it closed, or broke the protocol (an unmasked frame, say).
		return api.ExecControl{}, api.Errorf(api.CodeBadRequest, "read the exec request: %v", err)
	}
	if typ != websocket.MessageText {
		return api.ExecControl{}, api.Errorf(api.CodeBadRequest, "the first exec message must be a JSON ExecRequest")
	}
	var req api.ExecRequest
	if err := decodeJSON(data, &req); err != nil {
		return api.ExecControl{}, err
	}
	if err := req.Validate(); err != nil {
		return api.ExecControl{}, err
	}
	oomBefore, oomErr := d.sandboxes.OOMKills(name)
	proc, err := d.sandboxes.Exec(ctx, name, runtime.ExecSpec{
		Argv: req.Command,
		Env:  req.Env,
		Dir:  req.WorkDir,
		User: req.User,
		TTY:  req.TTY,
		Rows: req.Rows,
		Cols: req.Cols,
	})
	if err != nil {
		return api.ExecControl{}, err
	}
	handed.keep(req)
	closeHanded = false
	// With a client that speaks flow control, output waits for its credit and stdin goes
	// through a queue, so that this end reads the socket continuously (keepalives pass) and a
	// slow consumer at either end holds data back rather than blocking the socket.
	// lost ends the waits for the client's credit and the feeding of its stdin once the
	// connection is gone. The reading itself keeps the request's context: a Read whose context
	// ends closes the connection, which must stay open until the exit message is sent.
	readCtx := ctx
	ctx, lost := context.WithCancel(ctx)
	defer lost()
	f := execFlow{proc: proc}
	started := api.ExecControl{Type: api.ControlStarted, HandedOff: handed.names()}
	// Waits on the client's pipes end with the exec (or with the client).
	handed.stopWhen(ctx)
	if req.Window > 0 {
		f.credit = execflow.NewCredit(req.Window)
		f.stdin = execflow.NewQueue(execStdinWindow)
		started.Window = execStdinWindow
	}
	s.control(ctx, started)
	if !req.Stdin {
		// Without a TTY the command reads EOF at once. A TTY's end of input is its EOF
		// character, which only a client's end of input types.
		if !req.TTY {
			proc.Stdin().Close()
		}
	} else if in := handed[api.StreamStdin]; in != nil {
		go feedHandedStdin(proc, in)
	} else if f.stdin != nil {
		go f.feedStdin(ctx, s)
	}

	// A read takes what the pipe holds, up to a chunk, and never more than the client's window,
	// which a message must fit in whole.
	chunk := execChunk
	if req.Window > 0 {
		chunk = int(min(req.Window, execChunk))
	}
	var pumps sync.WaitGroup
	pump := func(id byte, r io.Reader) {
		if r == nil {
			return
		}
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			buf := make([]byte, 1+chunk)
			buf[0] = id
			for {
				n, err := r.Read(buf[1:])
				if n > 0 && (f.take(ctx, n) != nil || s.data(ctx, buf[:1+n]) != nil) {
					_, _ = io.Copy(io.Discard, r)
					return
				}
				if err != nil {
					return
				}
				if n < chunk/8 {
					// The command writes in small pieces (4 KiB for coreutils), each of
					// which woke this read: every piece became a message of its own, with
					// its wakeups, syscalls and TLS record at both ends, and that cost so
					// much CPU that the command fell further behind and the pieces stayed
					// small (stdout over a remote alternated between ~700 and ~150 MB/s).
					// A pause after sending lets the pipe fill, so the next read takes what
					// the command wrote meanwhile in one. What is read has been sent; the
					// next output waits at most the pause.
					_ = unix.Nanosleep(&unix.Timespec{Nsec: int64(smallReadPause)}, nil)
				}
			}
		}()
	}
	// A stream handed off goes from the command's pipe into the client's own, spliced.
	pumpTo := func(r io.Reader, out *os.File) {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			defer out.Close()
			_, _ = io.Copy(out, r)
		}()
	}
	for _, st := range []struct {
		id byte
		r  io.Reader
	}{{api.StreamStdout, proc.Stdout()}, {api.StreamStderr, proc.Stderr()}} {
		if out := handed[st.id]; out != nil && st.r != nil {
			pumpTo(st.r, out)
		} else {
			if out != nil {
				out.Close()
			}
			pump(st.id, st.r)
		}
	}

	var timedOut, exited atomic.Bool
	if req.TimeoutMS > 0 {
		t := time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() {
			timedOut.Store(true)
			_ = proc.Kill()
		})
		defer t.Stop()
	}
	go func() {
		err := f.readInput(readCtx, s.conn)
		if !exited.Load() {
			_ = proc.Kill()
		}
		if err != nil {
			d.log.Warn("exec: client protocol error", "sandbox", name, "err", err)
			s.conn.Close(websocket.StatusProtocolError, err.Error())
		}
		lost()
	}()
	stopPings := keepAlive(ctx, s.conn, func() { _ = proc.Kill() }, d.execKeepalive())
	defer stopPings()

	status, waitErr := proc.Wait()
	exited.Store(true)
	pumps.Wait()
	stopped := func() bool {
		sb, err := d.sandboxes.Get(ctx, name)
		return err != nil || sb.State != api.StateRunning
	}
	// A command killed by its sandbox stopping did not fail on its own: say what happened.
	if errors.Is(waitErr, runtime.ErrSandboxDied) || (waitErr == nil && status.Signal != 0 && stopped()) {
		return api.ExecControl{}, api.Errorf(api.CodeSandboxNotRunning, "sandbox %q stopped while the command was running", bare(name))
	}
	if waitErr != nil {
		return api.ExecControl{}, waitErr
	}
	exit := api.ExecControl{Type: api.ControlExit, ExitCode: status.ExitCode(), Signal: status.Signal}
	// Killed by SIGKILL (or a shell saying its child was, 137) while the sandbox's OOM counter
	// went up: the memory limit killed it (or a process of the same sandbox at the same moment,
	// which the counter cannot tell apart).
	if status.ExitCode() == 128+int(syscall.SIGKILL) && oomErr == nil && !timedOut.Load() {
		if n, err := d.sandboxes.OOMKills(name); err == nil && n > oomBefore {
			exit.OOMKilled = true
			if sb, err := d.sandboxes.Get(ctx, name); err == nil {
				exit.MemoryLimitMB = sb.MemoryMB
			}
		}
	}
	if timedOut.Load() {
		exit.TimedOut = true
		exit.ExitCode = api.ExitCodeTimeout
	}
	return exit, nil
}

// execChunk is the most output one message carries: large enough that the per-message costs
// (a frame, a syscall at each end, a wakeup) vanish beside the copying, small enough to fit an
// older client's read limit (api.MaxBodyBytes) and to leave a default window room for several in
// flight.
const execChunk = 256 << 10

// smallReadPause is how long an output pump waits after a small read of the command's
// output before it reads again (see there): at a gigabyte a second, 50 KiB of output, and for
// a person, nothing.
const smallReadPause = 50 * time.Microsecond

// execStdinWindow is how much of a flow-controlled client's stdin the daemon queues for a
// command that has not read it yet.
const execStdinWindow = 4 << 20

// execFlow is one exec's flow control; its credit and stdin queue are nil for a client without
// it.
type execFlow struct {
	proc   runtime.Process
	credit *execflow.Credit // the client's window for stdout and stderr
	stdin  *execflow.Queue  // stdin the command has not read yet
}

// take waits for the client's credit for n bytes of output.
func (f *execFlow) take(ctx context.Context, n int) error {
	if f.credit == nil {
		return nil
	}
	return f.credit.Take(ctx, int64(n))
}

// readInput forwards the client's stdin and control messages to the process until the
// connection ends, and returns a protocol error of the client's, if it makes one. A client that
// goes away before the command ends takes the command's process tree with it (the caller kills
// it); once the command has exited, what it left running in the background stays.
func (f *execFlow) readInput(ctx context.Context, conn *websocket.Conn) error {
	if f.stdin != nil {
		defer f.stdin.Close()
	}
	var buf []byte // stdin's copy buffer without flow control
	for {
		typ, r, err := conn.Reader(ctx)
		if err != nil {
			return nil
		}
		if typ == websocket.MessageBinary {
			// Stdin is read from the socket straight into its queue (or the command's pipe),
			// never gathered into a message first.
			var id [1]byte
			if _, err := io.ReadFull(r, id[:]); err != nil && err != io.EOF {
				return nil // the connection's
			} else if err != nil || id[0] != api.StreamStdin {
				return errors.New("a binary message to the daemon must be stdin (stream 0)")
			}
			if f.stdin != nil {
				if _, err := f.stdin.ReadFrom(api.StreamStdin, r); err != nil {
					if errors.Is(err, execflow.ErrOverrun) || errors.Is(err, execflow.ErrEnded) {
						return err
					}
					return nil // the connection's
				}
				continue
			}
			if buf == nil {
				buf = make([]byte, execChunk)
			}
			// A command that closed its stdin loses the rest, as a pipe's reader would.
			if _, err := io.CopyBuffer(struct{ io.Writer }{f.proc.Stdin()}, r, buf); err != nil {
				if _, err := io.Copy(io.Discard, r); err != nil {
					return nil
				}
			}
			continue
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return nil
		}
		var c api.ExecControl
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("a control message is not an ExecControl: %v", err)
		}
		switch c.Type {
		case api.ControlStdinEOF:
			if f.stdin != nil {
				f.stdin.Close()
			} else {
				f.proc.Stdin().Close()
			}
		case api.ControlResize:
			_ = f.proc.Resize(c.Rows, c.Cols)
		case api.ControlSignal:
			_ = f.proc.Signal(c.Signal)
		case api.ControlAck:
			if f.credit == nil {
				continue
			}
			if err := f.credit.Add(c.Bytes); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown control message type %q: use resize, stdin_eof, signal or ack", c.Type)
		}
	}
}

// feedStdin writes the queued stdin to the command as it reads it, acknowledging what it took,
// and closes the command's stdin at the end of the client's. Input a command no longer reads
// (it closed its stdin) is dropped but still acknowledged, so the client is never stuck.
func (f *execFlow) feedStdin(ctx context.Context, s *execStream) {
	broken := false
	_ = execflow.Drain(ctx, f.stdin, func(_ byte, b []byte) error {
		if !broken {
			_, err := f.proc.Stdin().Write(b)
			broken = err != nil
		}
		return nil
	}, func(n int64) error {
		_ = s.control(ctx, api.ExecControl{Type: api.ControlAck, Bytes: n}) // a lost client is readInput's to see
		return nil
	})
	f.proc.Stdin().Close()
}

// feedHandedStdin splices the client's handed-off stdin into the command's and closes the
// command's at its end, or once the command stops reading (a broken pipe) or the exec is over
// (its deadline, set by execHandoff.stopWhen).
func feedHandedStdin(proc runtime.Process, in *os.File) {
	defer in.Close()
	defer proc.Stdin().Close()
	if w, ok := proc.Stdin().(*os.File); ok {
		_, _ = splice.Copy(w, in, nil)
		return
	}
	_, _ = io.Copy(proc.Stdin(), in)
}

// DefaultExecKeepalive is how often an exec's client is pinged unless --exec-keepalive says.
const DefaultExecKeepalive = 30 * time.Second

func (d *Daemon) execKeepalive() time.Duration {
	if d.cfg.ExecKeepalive > 0 {
		return d.cfg.ExecKeepalive
	}
	return DefaultExecKeepalive
}

// keepAliveMisses is how many pings in a row a client may leave unanswered before it is taken
// for gone (OpenSSH's ServerAliveCountMax is 3 too): one late pong on a loaded host is not a
// dead peer.
const keepAliveMisses = 3

// keepAlive pings the client every interval, each ping waiting up to interval for its pong; a
// client that misses keepAliveMisses in a row (gone without closing its connection) has its
// command's process tree killed (kill).
func keepAlive(ctx context.Context, conn *websocket.Conn, kill func(), interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		missed := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pingCtx, done := context.WithTimeout(ctx, interval)
				err := conn.Ping(pingCtx)
				done()
				switch {
				case ctx.Err() != nil:
					return
				case err == nil:
					missed = 0
				case errors.Is(err, context.DeadlineExceeded):
					if missed++; missed < keepAliveMisses {
						continue
					}
					kill()
					return
				default: // the connection itself failed
					kill()
					return
				}
			}
		}
	}()
	return cancel
}

// streamWriter is a ResponseWriter whose hijacked connection carries a stream: on a unix
// socket it gets a stream's send buffer (netcopy.WidenUnix), so that output in flight to the
// client is not cut into ~208 KiB pieces, each waking both ends; and its writes go through a
// buffer of streamWriteBuffer rather than the server's 4 KiB one (see there).
type streamWriter struct {
	http.ResponseWriter
	conn net.Conn // hijacked
}

// streamWriteBuffer is the WebSocket's write buffer on an exec stream. The library writes a
// frame's header into it and then the payload: with 4 KiB, every message went out as a 4 KiB
// write (over TLS, a 4 KiB record of its own) and then the rest, so that output read from the
// command in small pieces cost two records and two syscalls a piece. A message up to this size
// is one write; a larger one fills the buffer once and writes the rest straight through.
const streamWriteBuffer = 64 << 10

func (w *streamWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return c, brw, err
	}
	netcopy.WidenUnix(c)
	w.conn = c
	// What the server buffered (the answer, if it is still there) goes first.
	if err := brw.Writer.Flush(); err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(c, streamWriteBuffer)), nil
}

// execStream serializes writes on the exec WebSocket.
type execStream struct {
	mu   sync.Mutex
	conn *websocket.Conn
	raw  net.Conn // the connection under it
}

// data sends output; over TLS, a message's records go out in one write (netcopy.HoldWrites).
func (s *execStream) data(ctx context.Context, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	release := func() error { return nil }
	if s.raw != nil {
		release = netcopy.HoldWrites(s.raw)
	}
	err := s.conn.Write(ctx, websocket.MessageBinary, b)
	if rerr := release(); err == nil {
		err = rerr
	}
	return err
}

func (s *execStream) control(ctx context.Context, c api.ExecControl) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.Write(ctx, websocket.MessageText, []byte(mustJSON(c)))
}
