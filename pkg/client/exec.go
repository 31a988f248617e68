package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/hiloop/hiloop/internal/execflow"
	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/pkg/api"
)

// ExecIO connects an exec to the caller's streams. Nil Stdout or Stderr discard output; Stdin
// is read only when the request asks for it.
type ExecIO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Resize delivers window sizes ([rows, cols]) for a TTY exec.
	Resize <-chan [2]uint16
	// Signals delivers signal numbers to forward to the command.
	Signals <-chan int
	// Started, if set, is called once the command runs.
	Started func()
	// HandOff gives the daemon those of Stdin, Stdout and Stderr that are *os.File pipes or
	// regular files, when it is reached over its unix socket: it then moves the command's data
	// into and out of them itself (at the speed of a local pipe) instead of through this
	// process. Without a TTY only; over TCP everything streams.
	HandOff bool
}

// ExecResult is how the command ended.
type ExecResult struct {
	// ExitCode is the command's exit code, 128+n for a signal, or 124 after a timeout.
	ExitCode int
	// Signal is the signal that killed the command, if one did.
	Signal int
	// TimedOut says the daemon killed the command's tree at the request's timeout.
	TimedOut bool
	// OOMKilled says the sandbox's memory limit, MemoryLimitMB, killed the command.
	OOMKilled     bool
	MemoryLimitMB int
	// HandedOff names the streams the daemon took as descriptors (ExecIO.HandOff): their data
	// never passed through this process.
	HandedOff []string
}

// execWindow is how much of a command's output the client takes ahead of writing it out: the
// daemon sends no more before the client acknowledges what it wrote (pkg/api/exec.go).
const execWindow = 4 << 20

// execChunk is the most stdin one message carries (the daemon's output chunk is its own).
const execChunk = 256 << 10

// Exec runs a command in a running sandbox, streaming its output until it ends. Output reaches
// stdio in the order the command wrote it, per stream; a slow Stdout holds the command back
// (flow control) rather than buffering without bound or losing the connection.
func (c *Client) Exec(ctx context.Context, name string, req api.ExecRequest, stdio ExecIO) (ExecResult, error) {
	header := http.Header{}
	c.authorize(header)
	offered := c.handoff(req, stdio)
	if len(offered.names) > 0 {
		header.Set(api.ExecHandoffHeader, strings.Join(offered.names, ","))
	}
	wsURL := "ws" + c.baseURL[len("http"):] + "/v1/sandboxes/" + url.PathEscape(name) + "/exec"
	var batch *batchConn
	conn, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: upgrader{dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := c.dial(ctx, network, addr)
			if err == nil {
				netcopy.WidenUnix(conn) // stdin in flight, as the daemon does for output
				batch = &batchConn{Conn: handoff.Send(conn, offered.files)}
				conn = batch
			}
			return conn, err
		}}},
		HTTPHeader: header,
	})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return ExecResult{}, decodeError(resp)
		}
		if dialErr := c.dialError(err); dialErr != nil {
			return ExecResult{}, dialErr
		}
		return ExecResult{}, fmt.Errorf("exec in %q: %w", name, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(api.MaxBodyBytes)
	if v := resp.Header.Get(api.VersionHeader); v != "" {
		c.daemonVersion.Store(v)
	}

	req.Window = execWindow
	first, _ := json.Marshal(req)
	if err := conn.Write(ctx, websocket.MessageText, first); err != nil {
		return ExecResult{}, fmt.Errorf("exec in %q: %w", name, err)
	}

	// The socket is read here without pause; output goes through a queue to a writer of its
	// own, which acknowledges what it wrote.
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	out := execflow.NewQueue(execWindow)
	widenPipe(stdio.Stdout)
	widenPipe(stdio.Stderr)
	var outErr error
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		outErr = execflow.Drain(readCtx, out, func(id byte, b []byte) error {
			w := stdio.Stdout
			if id == api.StreamStderr {
				w = stdio.Stderr
			}
			if w == nil {
				return nil
			}
			if _, err := w.Write(b); err != nil {
				return fmt.Errorf("write command output: %w", err)
			}
			return nil
		}, func(n int64) error {
			// A lost connection is the reader's to report; the daemon may also have closed it
			// after its exit message, with the last output still being written here.
			_ = writeControl(readCtx, conn, api.ExecControl{Type: api.ControlAck, Bytes: n})
			return nil
		})
		if outErr != nil {
			stopReading()
		}
	}()
	started := make(chan *execflow.Credit, 1)
	go forwardInput(readCtx, conn, batch, req.Stdin, stdio, started)

	var stdinCredit *execflow.Credit
	var handedOff []string
	for {
		typ, r, err := conn.Reader(readCtx)
		var data []byte
		switch {
		case err != nil:
		case typ == websocket.MessageBinary:
			if err = readOutput(out, r); err == nil {
				continue
			}
			if errors.Is(err, execflow.ErrOverrun) {
				return ExecResult{}, fmt.Errorf("exec in %q: %w", name, err)
			}
		default:
			data, err = io.ReadAll(r)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ExecResult{}, ctx.Err()
			}
			if readCtx.Err() != nil { // the writer failed and stopped the reading
				<-outDone
				return ExecResult{}, outErr
			}
			return ExecResult{}, fmt.Errorf("exec in %q: connection to sandboxd lost: %w", name, err)
		}
		var ctl api.ExecControl
		if err := json.Unmarshal(data, &ctl); err != nil {
			return ExecResult{}, fmt.Errorf("exec in %q: bad control message: %w", name, err)
		}
		switch ctl.Type {
		case api.ControlStarted:
			if ctl.Window > 0 {
				stdinCredit = execflow.NewCredit(ctl.Window)
			}
			handedOff = ctl.HandedOff
			if slices.Contains(ctl.HandedOff, api.StreamNameStdin) {
				close(started) // the daemon reads stdin itself
			} else {
				started <- stdinCredit
			}
			if stdio.Started != nil {
				stdio.Started()
			}
		case api.ControlAck:
			if stdinCredit != nil {
				if err := stdinCredit.Add(ctl.Bytes); err != nil {
					return ExecResult{}, fmt.Errorf("exec in %q: %w", name, err)
				}
			}
		case api.ControlExit:
			out.Close()
			<-outDone
			if outErr != nil {
				return ExecResult{}, outErr
			}
			// Nothing follows the exit: the connection just closes (the deferred CloseNow). A
			// close handshake would cost a frame each way and a wait for the daemon's; the
			// daemon, which sent its close frame after the exit, takes the end as the same.
			return ExecResult{ExitCode: ctl.ExitCode, Signal: ctl.Signal, TimedOut: ctl.TimedOut,
				OOMKilled: ctl.OOMKilled, MemoryLimitMB: ctl.MemoryLimitMB, HandedOff: handedOff}, nil
		case api.ControlError:
			if ctl.Error != nil {
				return ExecResult{}, ctl.Error
			}
			return ExecResult{}, fmt.Errorf("exec in %q failed", name)
		}
	}
}

// offer is what an exec hands off: the files and, in the same order, their stream names.
type offer struct {
	files []*os.File
	names []string
}

// handoff picks the streams of stdio an exec can hand the daemon (ExecIO.HandOff).
func (c *Client) handoff(req api.ExecRequest, stdio ExecIO) offer {
	var o offer
	if !stdio.HandOff || !c.local || req.TTY {
		return o
	}
	add := func(s any, name string) {
		if f, ok := s.(*os.File); ok && f != nil && handoff.Eligible(f) {
			o.files = append(o.files, f)
			o.names = append(o.names, name)
		}
	}
	if req.Stdin {
		add(stdio.Stdin, api.StreamNameStdin)
	}
	add(stdio.Stdout, api.StreamNameStdout)
	add(stdio.Stderr, api.StreamNameStderr)
	return o
}

// readOutput queues one output message, read from the socket straight into the queue rather
// than gathered into a message first.
func readOutput(out *execflow.Queue, r io.Reader) error {
	var id [1]byte
	if _, err := io.ReadFull(r, id[:]); err != nil {
		if err == io.EOF {
			return nil // an empty message
		}
		return err
	}
	_, err := out.ReadFrom(id[0], r)
	return err
}

// forwardInput sends stdin, window sizes and signals until ctx ends. Stdin waits for the
// command to start, and then for the daemon's credit when it gives one.
func forwardInput(ctx context.Context, conn *websocket.Conn, batch *batchConn, sendStdin bool, stdio ExecIO, started <-chan *execflow.Credit) {
	if sendStdin && stdio.Stdin != nil {
		go func() {
			var credit *execflow.Credit
			select {
			case c, ok := <-started:
				if !ok {
					return // handed off
				}
				credit = c
			case <-ctx.Done():
				return
			}
			// One message fits the daemon's window whole.
			chunk := int64(execChunk)
			if credit != nil {
				chunk = min(chunk, credit.Window())
			}
			widenPipe(stdio.Stdin)
			buf := make([]byte, 1+chunk)
			buf[0] = api.StreamStdin
			for {
				n, err := stdio.Stdin.Read(buf[1:])
				if n > 0 {
					if credit != nil && credit.Take(ctx, int64(n)) != nil {
						return
					}
					// The library masks a client's frame into its 4 KiB buffer and writes
					// each 4 KiB as it fills: batched, a message goes out in large writes
					// (over TLS, full records) rather than 64 small ones.
					batch.hold()
					err := conn.Write(ctx, websocket.MessageBinary, buf[:1+n])
					if batch.release() != nil || err != nil {
						return
					}
				}
				if err != nil {
					_ = writeControl(ctx, conn, api.ExecControl{Type: api.ControlStdinEOF})
					return
				}
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case sz := <-stdio.Resize:
			_ = writeControl(ctx, conn, api.ExecControl{Type: api.ControlResize, Rows: sz[0], Cols: sz[1]})
		case sig := <-stdio.Signals:
			_ = writeControl(ctx, conn, api.ExecControl{Type: api.ControlSignal, Signal: sig})
		}
	}
}

func writeControl(ctx context.Context, conn *websocket.Conn, c api.ExecControl) error {
	b, _ := json.Marshal(c)
	return conn.Write(ctx, websocket.MessageText, b)
}

// batchConn is the exec connection's writer side: between hold and release it gathers the
// writes made under it into writes of up to batchSize, and otherwise passes them straight
// through. The WebSocket library writes a client's frame (which it must mask, copying it) in
// pieces of its 4 KiB buffer, each flushed to the connection: over TLS a record and a syscall
// for every 4 KiB of stdin, which cost more than the encryption itself. Another writer's frame
// (an ack, a pong) that comes while a stdin message is held waits in the batch behind it, as
// it would have waited for the message's frame anyway.
type batchConn struct {
	net.Conn
	mu    sync.Mutex
	holds int
	buf   []byte
}

// batchSize is the most a batch gathers before it writes: a stdin message whole.
const batchSize = execChunk + 64

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holds == 0 {
		if err := b.flush(); err != nil {
			return 0, err
		}
		return b.Conn.Write(p)
	}
	if len(b.buf)+len(p) > cap(b.buf) {
		if err := b.flush(); err != nil {
			return 0, err
		}
		if len(p) > cap(b.buf) {
			return b.Conn.Write(p)
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// hold starts gathering writes; every hold is matched by a release.
func (b *batchConn) hold() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holds++
	if b.buf == nil {
		b.buf = make([]byte, 0, batchSize)
	}
}

// release ends a hold, writing what was gathered once no hold is left, and returns the error
// of that write.
func (b *batchConn) release() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holds--; b.holds > 0 {
		return nil
	}
	return b.flush()
}

func (b *batchConn) flush() error {
	if len(b.buf) == 0 {
		return nil
	}
	// Over TLS, the batch's records go out in one write too.
	release := netcopy.HoldWrites(b.Conn)
	_, err := b.Conn.Write(b.buf)
	if rerr := release(); err == nil {
		err = rerr
	}
	b.buf = b.buf[:0]
	return err
}
