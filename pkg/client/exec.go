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

	"github.com/coder/websocket"

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
}

// ExecResult is how the command ended.
type ExecResult struct {
	// ExitCode is the command's exit code, 128+n for a signal, or 124 after a timeout.
	ExitCode int
	// Signal is the signal that killed the command, if one did.
	Signal int
	// TimedOut says the daemon killed the command's tree at the request's timeout.
	TimedOut bool
}

// Exec runs a command in a running sandbox, streaming its output until it ends.
func (c *Client) Exec(ctx context.Context, name string, req api.ExecRequest, stdio ExecIO) (ExecResult, error) {
	header := http.Header{}
	if c.token != "" {
		header.Set("Authorization", "Bearer "+c.token)
	}
	wsURL := "ws" + c.baseURL[len("http"):] + "/v1/sandboxes/" + url.PathEscape(name) + "/exec"
	conn, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: c.dial}},
		HTTPHeader: header,
	})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return ExecResult{}, decodeError(resp)
		}
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return ExecResult{}, &UnreachableError{Host: c.host, Err: opErr.Err}
		}
		return ExecResult{}, fmt.Errorf("exec in %q: %w", name, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(api.MaxBodyBytes)
	if v := resp.Header.Get(api.VersionHeader); v != "" {
		c.daemonVersion.Store(v)
	}

	first, _ := json.Marshal(req)
	if err := conn.Write(ctx, websocket.MessageText, first); err != nil {
		return ExecResult{}, fmt.Errorf("exec in %q: %w", name, err)
	}
	inputCtx, stopInput := context.WithCancel(ctx)
	defer stopInput()
	go forwardInput(inputCtx, conn, req.Stdin, stdio)

	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ExecResult{}, ctx.Err()
			}
			return ExecResult{}, fmt.Errorf("exec in %q: connection to sandboxd lost: %w", name, err)
		}
		if typ == websocket.MessageBinary {
			if len(data) == 0 {
				continue
			}
			w := stdio.Stdout
			if data[0] == api.StreamStderr {
				w = stdio.Stderr
			}
			if w != nil {
				if _, err := w.Write(data[1:]); err != nil {
					return ExecResult{}, fmt.Errorf("write command output: %w", err)
				}
			}
			continue
		}
		var ctl api.ExecControl
		if err := json.Unmarshal(data, &ctl); err != nil {
			return ExecResult{}, fmt.Errorf("exec in %q: bad control message: %w", name, err)
		}
		switch ctl.Type {
		case api.ControlStarted:
			if stdio.Started != nil {
				stdio.Started()
			}
		case api.ControlExit:
			conn.Close(websocket.StatusNormalClosure, "")
			return ExecResult{ExitCode: ctl.ExitCode, Signal: ctl.Signal, TimedOut: ctl.TimedOut}, nil
		case api.ControlError:
			if ctl.Error != nil {
				return ExecResult{}, ctl.Error
			}
			return ExecResult{}, fmt.Errorf("exec in %q failed", name)
		}
	}
}

// forwardInput sends stdin, window sizes and signals until ctx ends.
func forwardInput(ctx context.Context, conn *websocket.Conn, sendStdin bool, stdio ExecIO) {
	if sendStdin && stdio.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			buf[0] = api.StreamStdin
			for {
				n, err := stdio.Stdin.Read(buf[1:])
				if n > 0 {
					if conn.Write(ctx, websocket.MessageBinary, buf[:1+n]) != nil {
						return
					}
				}
				if err != nil {
					writeControl(ctx, conn, api.ExecControl{Type: api.ControlStdinEOF})
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
			writeControl(ctx, conn, api.ExecControl{Type: api.ControlResize, Rows: sz[0], Cols: sz[1]})
		case sig := <-stdio.Signals:
			writeControl(ctx, conn, api.ExecControl{Type: api.ControlSignal, Signal: sig})
		}
	}
}

func writeControl(ctx context.Context, conn *websocket.Conn, c api.ExecControl) {
	b, _ := json.Marshal(c)
	_ = conn.Write(ctx, websocket.MessageText, b)
}
