package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
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
	var stderr bytes.Buffer // read once the exec is over
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
	done := make(chan string, 1) // how the exec ended
	go func() {
		res, err := c.Exec(ctx, args[0], api.ExecRequest{
			Command: ad.Argv, Env: ad.Env(harness.Env{}), Stdin: true, TimeoutMS: acpInitTimeout.Milliseconds(),
		}, client.ExecIO{Stdin: stdin, Stdout: answers, Stderr: &stderr})
		answers.Close()
		<-scanned
		if err != nil {
			done <- err.Error()
		} else {
			done <- fmt.Sprintf("exit code %d", res.ExitCode)
		}
	}()
	go func() {
		req := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{},"clientInfo":{"name":"hiloop-e2e","version":"0"}}}`
		_, _ = io.WriteString(feed, req+"\n")
	}()

	var line, why string
	select {
	case line = <-answer:
	case how := <-done:
		done <- how // for the wait below
		why = "ended before it answered initialize: " + how
	case <-ctx.Done():
		why = fmt.Sprintf("did not answer initialize within %s", acpInitTimeout)
	}
	cancel() // hangs up: the daemon kills the harness's process tree
	<-done   // the exec is over: nothing writes stderr any more
	if line == "" {
		select {
		case line = <-answer: // it answered, then exited
		default:
			ts.Fatalf("harness %s %s\nstderr:\n%s", args[1], why, stderr.String())
		}
	}
	fmt.Fprintln(ts.Stdout(), line)
	if strings.Contains(line, `"error"`) && !strings.Contains(line, `"result"`) {
		ts.Fatalf("harness %s refused initialize: %s\nstderr:\n%s", args[1], line, stderr.String())
	}
}
