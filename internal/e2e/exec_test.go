package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// cmdExecWindow: execwindow SANDBOX WINDOW CMD... runs CMD over the exec WebSocket as a client
// of its own that gives the daemon a window of WINDOW bytes (0: an older client without flow
// control, which never acknowledges). It fails if a data message carries more than the window,
// acknowledges each message as it reads it, and prints the bytes of stdout and stderr it got
// and the exit code.
func cmdExecWindow(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: execwindow SANDBOX WINDOW CMD...")
	}
	window, err := strconv.ParseInt(args[1], 10, 64)
	ts.Check(err)
	d := ts.Value(daemonKey).(*scriptDaemon)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://sandboxd/v1/sandboxes/"+args[0]+"/exec", &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
			},
		}},
	})
	ts.Check(err)
	defer conn.CloseNow()
	conn.SetReadLimit(api.MaxBodyBytes)
	req, _ := json.Marshal(api.ExecRequest{Command: args[2:], Window: window})
	ts.Check(conn.Write(ctx, websocket.MessageText, req))
	var got [3]int64
	for {
		typ, data, err := conn.Read(ctx)
		ts.Check(err)
		if typ == websocket.MessageBinary {
			n := int64(len(data) - 1)
			if window > 0 && n > window {
				ts.Fatalf("a message of %d bytes of stream %d, beyond the window of %d", n, data[0], window)
			}
			got[data[0]] += n
			if window > 0 && n > 0 {
				ack, _ := json.Marshal(api.ExecControl{Type: api.ControlAck, Bytes: n})
				ts.Check(conn.Write(ctx, websocket.MessageText, ack))
			}
			continue
		}
		var c api.ExecControl
		ts.Check(json.Unmarshal(data, &c))
		switch c.Type {
		case api.ControlExit:
			fmt.Fprintf(ts.Stdout(), "stdout %d stderr %d exit %d\n", got[api.StreamStdout], got[api.StreamStderr], c.ExitCode)
			return
		case api.ControlError:
			ts.Fatalf("exec failed: %v", c.Error)
		}
	}
}

// cmdExecHandoff: exechandoff SANDBOX IN OUT ERR CMD... runs CMD through pkg/client with
// ExecIO.HandOff on the unix socket: stdin is the file IN, stdout a pipe this command copies
// into the file OUT, stderr the file ERR (created). It prints the streams the daemon took as
// descriptors and the exit code.
func cmdExecHandoff(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 5 {
		ts.Fatalf("usage: exechandoff SANDBOX IN OUT ERR CMD...")
	}
	d := ts.Value(daemonKey).(*scriptDaemon)
	c, err := client.New("unix://"+d.socket, "")
	ts.Check(err)
	in, err := os.Open(ts.MkAbs(args[1]))
	ts.Check(err)
	defer in.Close()
	out, err := os.Create(ts.MkAbs(args[2]))
	ts.Check(err)
	defer out.Close()
	errFile, err := os.Create(ts.MkAbs(args[3]))
	ts.Check(err)
	defer errFile.Close()
	pr, pw, err := os.Pipe()
	ts.Check(err)
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, pr)
		pr.Close()
		copied <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, args[0], api.ExecRequest{Command: args[4:], Stdin: true},
		client.ExecIO{Stdin: in, Stdout: pw, Stderr: errFile, HandOff: true})
	pw.Close()
	ts.Check(err)
	ts.Check(<-copied)
	fmt.Fprintf(ts.Stdout(), "handed off %s exit %d\n", strings.Join(res.HandedOff, ","), res.ExitCode)
}
