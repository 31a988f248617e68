package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hiloop/hiloop/internal/harness"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// acpInitTimeout bounds a harness's answer to initialize; the slowest measured here answers in
// seconds, a cold start of a 2 GiB image on a busy machine in more.
const acpInitTimeout = 2 * time.Minute

// cmdACPInit: acpinit SANDBOX HARNESS starts the harness in the sandbox the way a session does
// (its adapter's argv and environment, as the agent user in /workspace), sends ACP initialize,
// prints the harness's answer on stdout and stops it. It fails when the harness answers with an
// error, exits, or stays silent for acpInitTimeout; its stderr goes into the failure.
func cmdACPInit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: acpinit SANDBOX HARNESS")
	}
	ad, err := harness.Lookup(args[1])
	ts.Check(err)
	d := ts.Value(daemonKey).(*scriptDaemon)
	c, err := client.New("unix://"+d.socket, "")
	ts.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), acpInitTimeout)
	defer cancel()

	stdin, feed := io.Pipe()
	defer feed.Close()
	out, answers := io.Pipe()
	stderr := &lockedBuffer{}
	// The answer is the line with id 0; notifications may come first. Once the harness's stdout
	// ends, answer holds it or nothing.
	answer := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var msg struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &msg) == nil && msg.ID != nil && *msg.ID == 0 {
				answer <- sc.Text()
				break
			}
		}
		_, _ = io.Copy(io.Discard, out) // the exec must not block on its stdout
	}()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, args[0], api.ExecRequest{
			Command: ad.Argv, Env: ad.Env(harness.Env{}), Stdin: true, TimeoutMS: acpInitTimeout.Milliseconds(),
		}, client.ExecIO{Stdin: stdin, Stdout: answers, Stderr: stderr})
		answers.Close()
		<-scanned
		done <- err
	}()
	go func() {
		req := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{},"clientInfo":{"name":"hiloop-e2e","version":"0"}}}`
		_, _ = io.WriteString(feed, req+"\n")
	}()

	var line string
	select {
	case line = <-answer:
	case err := <-done:
		select {
		case line = <-answer: // it answered, then exited
		default:
			ts.Fatalf("harness %s ended before it answered initialize: %v\nstderr:\n%s", args[1], err, stderr)
		}
	case <-ctx.Done():
		ts.Fatalf("harness %s did not answer initialize within %s\nstderr:\n%s", args[1], acpInitTimeout, stderr)
	}
	cancel() // hangs up: the daemon kills the harness's process tree
	fmt.Fprintln(ts.Stdout(), line)
	if strings.Contains(line, `"error"`) && !strings.Contains(line, `"result"`) {
		ts.Fatalf("harness %s refused initialize: %s\nstderr:\n%s", args[1], line, stderr)
	}
}

// lockedBuffer collects a command's stderr while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
