package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// execSandbox serves the exec WebSocket (the protocol is described in pkg/api/exec.go).
func (d *Daemon) execSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	// Refuse before the upgrade where we can, so a plain HTTP error reaches the client.
	sb, err := d.sandboxes.Get(r.Context(), name)
	if err != nil {
		return err
	}
	if sb.State != api.StateRunning {
		return api.Errorf(api.CodeSandboxNotRunning, "sandbox %q is %s: start it with `hiloop sandbox start %s`", name, sb.State, name)
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept has answered the client already
	}
	defer conn.CloseNow()
	conn.SetReadLimit(api.MaxBodyBytes)
	ctx := r.Context()

	s := &execStream{conn: conn}
	exit, err := d.runExec(ctx, name, s)
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

// runExec reads the request, runs the process and pumps its streams until it ends.
func (d *Daemon) runExec(ctx context.Context, name string, s *execStream) (api.ExecControl, error) {
	typ, data, err := s.conn.Read(ctx)
	if err != nil {
		return api.ExecControl{}, err
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
	s.control(ctx, api.ExecControl{Type: api.ControlStarted})
	if !req.Stdin {
		proc.Stdin().Close()
	}

	var pumps sync.WaitGroup
	pump := func(id byte, r io.Reader) {
		if r == nil {
			return
		}
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			buf := make([]byte, 32<<10)
			buf[0] = id
			for {
				n, err := r.Read(buf[1:])
				if n > 0 && s.data(ctx, buf[:1+n]) != nil {
					_, _ = io.Copy(io.Discard, r)
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	pump(api.StreamStdout, proc.Stdout())
	pump(api.StreamStderr, proc.Stderr())

	var timedOut, exited atomic.Bool
	if req.TimeoutMS > 0 {
		t := time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() {
			timedOut.Store(true)
			_ = proc.Kill()
		})
		defer t.Stop()
	}
	go d.readExecInput(ctx, s.conn, proc, &exited)
	stopPings := keepAlive(ctx, s.conn, proc)
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
		return api.ExecControl{}, api.Errorf(api.CodeSandboxNotRunning, "sandbox %q stopped while the command was running", name)
	}
	if waitErr != nil {
		return api.ExecControl{}, waitErr
	}
	exit := api.ExecControl{Type: api.ControlExit, ExitCode: status.ExitCode(), Signal: status.Signal}
	if timedOut.Load() {
		exit.TimedOut = true
		exit.ExitCode = api.ExitCodeTimeout
	}
	return exit, nil
}

// readExecInput forwards the client's stdin and control messages to the process. A client
// that goes away before the command ends takes the command's process tree with it; once the
// command has exited, what it left running in the background stays.
func (d *Daemon) readExecInput(ctx context.Context, conn *websocket.Conn, proc runtime.Process, exited *atomic.Bool) {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if !exited.Load() {
				_ = proc.Kill()
			}
			return
		}
		if typ == websocket.MessageBinary {
			if len(data) > 1 && data[0] == api.StreamStdin {
				_, _ = proc.Stdin().Write(data[1:])
			}
			continue
		}
		var c api.ExecControl
		if json.Unmarshal(data, &c) != nil {
			continue
		}
		switch c.Type {
		case api.ControlStdinEOF:
			proc.Stdin().Close()
		case api.ControlResize:
			_ = proc.Resize(c.Rows, c.Cols)
		case api.ControlSignal:
			_ = proc.Signal(c.Signal)
		}
	}
}

// execPingInterval is how often an exec's client is pinged; one that stops answering (gone
// without closing its connection) has its command's process tree killed.
const execPingInterval = 30 * time.Second

func keepAlive(ctx context.Context, conn *websocket.Conn, proc runtime.Process) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(execPingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pingCtx, done := context.WithTimeout(ctx, execPingInterval)
				err := conn.Ping(pingCtx)
				done()
				if err != nil && ctx.Err() == nil {
					_ = proc.Kill()
					return
				}
			}
		}
	}()
	return cancel
}

// execStream serializes writes on the exec WebSocket.
type execStream struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

func (s *execStream) data(ctx context.Context, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.Write(ctx, websocket.MessageBinary, b)
}

func (s *execStream) control(ctx context.Context, c api.ExecControl) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.conn.Write(ctx, websocket.MessageText, []byte(mustJSON(c)))
}
