package fake

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// testClient is the ACP client side of a test: it records updates and answers permission
// requests by kind, as the daemon must.
type testClient struct {
	mu          sync.Mutex
	updates     []acp.SessionNotification
	permissions []acp.RequestPermissionRequest

	// onUpdate, when set, sees every update as it arrives.
	onUpdate func(acp.SessionNotification)
	// answer answers a permission request; by default the allow_once option.
	answer func(context.Context, acp.RequestPermissionRequest) acp.RequestPermissionResponse

	// Updates read off the wire and not yet handled (flowControl), and the signal that one was.
	queued  int
	handled *sync.Cond
}

func (c *testClient) SessionUpdate(ctx context.Context, n acp.SessionNotification) error {
	c.mu.Lock()
	c.updates = append(c.updates, n)
	c.queued--
	if c.handled != nil {
		c.handled.Signal()
	}
	c.mu.Unlock()
	if c.onUpdate != nil {
		c.onUpdate(n)
	}
	return nil
}

func (c *testClient) RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.permissions = append(c.permissions, p)
	c.mu.Unlock()
	if c.answer != nil {
		return c.answer(ctx, p), nil
	}
	return choose(acp.PermissionOptionKindAllowOnce)(ctx, p), nil
}

// choose answers with the option of the given kind, whatever its id.
func choose(kind acp.PermissionOptionKind) func(context.Context, acp.RequestPermissionRequest) acp.RequestPermissionResponse {
	return func(_ context.Context, p acp.RequestPermissionRequest) acp.RequestPermissionResponse {
		for _, o := range p.Options {
			if o.Kind == kind {
				return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
					Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId, Outcome: "selected"}}}
			}
		}
		panic(fmt.Sprintf("no option of kind %s in %+v", kind, p.Options))
	}
}

var errUnsupported = errors.New("the test client does not support this")

func (c *testClient) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, errUnsupported
}

func (c *testClient) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, errUnsupported
}

func (c *testClient) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, errUnsupported
}

func (c *testClient) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, errUnsupported
}

func (c *testClient) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, errUnsupported
}

func (c *testClient) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, errUnsupported
}

func (c *testClient) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, errUnsupported
}

// seen describes the updates received so far, one short string each.
func (c *testClient) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.updates))
	for i, n := range c.updates {
		out[i] = describe(n.Update)
	}
	return out
}

func (c *testClient) reset() {
	c.mu.Lock()
	c.updates = nil
	c.permissions = nil
	c.mu.Unlock()
}

// describe renders an update as e.g. "message:hello" or "tool_update:c1:completed:done".
func describe(u acp.SessionUpdate) string {
	text := func(b acp.ContentBlock) string {
		if b.Text == nil {
			return "<non-text>"
		}
		return b.Text.Text
	}
	switch {
	case u.UserMessageChunk != nil:
		return "user:" + text(u.UserMessageChunk.Content)
	case u.AgentMessageChunk != nil:
		return "message:" + text(u.AgentMessageChunk.Content)
	case u.AgentThoughtChunk != nil:
		return "thought:" + text(u.AgentThoughtChunk.Content)
	case u.Plan != nil:
		var entries []string
		for _, e := range u.Plan.Entries {
			entries = append(entries, fmt.Sprintf("%s(%s)", e.Content, e.Status))
		}
		return "plan:" + strings.Join(entries, "|")
	case u.ToolCall != nil:
		tc := u.ToolCall
		return fmt.Sprintf("tool:%s:%s:%s:%s", tc.ToolCallId, tc.Kind, tc.Status, tc.Title)
	case u.ToolCallUpdate != nil:
		tu := u.ToolCallUpdate
		s := fmt.Sprintf("tool_update:%s", tu.ToolCallId)
		if tu.Status != nil {
			s += ":" + string(*tu.Status)
		}
		for _, c := range tu.Content {
			if d := c.Diff; d != nil {
				old := "<new file>"
				if d.OldText != nil {
					old = *d.OldText
				}
				s += fmt.Sprintf(":diff %s %q -> %q", d.Path, old, d.NewText)
				continue
			}
			s += ":" + text(c.Content.Content)
		}
		return s
	}
	return "other"
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// peer is a running fake agent, in this process or as a subprocess, and its client.
type peer struct {
	conn   *acp.ClientSideConnection
	client *testClient
	stdout *syncBuffer // everything the agent wrote to stdout, raw
	stderr *syncBuffer
	stdin  io.Closer
	exited chan struct{}
	err    error // Run's or the process's result, set before exited closes
}

// wait waits for the agent to exit and returns its result.
func (p *peer) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(10 * time.Second):
		t.Fatalf("the fake agent did not exit; stderr:\n%s", p.stderr.String())
		return nil
	}
}

// stop closes the agent's stdin and checks that it exits cleanly.
func (p *peer) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	if err := p.wait(t); err != nil {
		t.Errorf("the fake agent exited with %v; stderr:\n%s", err, p.stderr.String())
	}
}

// startAgent runs the agent in this process over pipes.
func startAgent(t *testing.T, stateDir string, c *testClient) *peer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &peer{client: c, stdout: &syncBuffer{}, stderr: &syncBuffer{}, stdin: inW, exited: make(chan struct{})}
	go func() {
		p.err = Run(context.Background(), stateDir, inR, io.MultiWriter(outW, p.stdout), p.stderr)
		outW.Close()
		close(p.exited)
	}()
	p.conn = connect(c, inW, outR, p.stderr)
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("the fake agent did not exit when stdin closed")
		}
	})
	return p
}

// connect makes the client side; its reader waits for the logger to be set, as Run's does.
func connect(c *testClient, w io.Writer, r io.Reader, log io.Writer) *acp.ClientSideConnection {
	ready := make(chan struct{})
	c.handled = sync.NewCond(&c.mu)
	conn := acp.NewClientSideConnection(c, w, gatedReader{r: &flowControl{r: bufio.NewReader(r), c: c}, ready: ready})
	conn.SetLogger(slog.New(slog.NewTextHandler(log, nil)))
	close(ready)
	return conn
}

// maxQueued is how many updates the test client lets the SDK queue: less than the SDK's limit.
const maxQueued = 256

// flowControl keeps the agent from outrunning the test client. The SDK's client side queues the
// notifications it reads for its handler and closes the connection when more than 1,024 wait
// (the daemon's tap stores updates itself for this reason); against a chatty script a test
// client that only decodes them can fall that far behind. flowControl hands the SDK a line at a
// time and holds a session/update back while maxQueued are yet to reach the client's handler,
// which leaves the agent blocked on its stdout, as a slow reader does.
type flowControl struct {
	r    *bufio.Reader
	c    *testClient
	rest []byte // what is left of the current line
}

func (f *flowControl) Read(p []byte) (int, error) {
	if len(f.rest) == 0 {
		line, err := f.r.ReadBytes('\n')
		if len(line) == 0 {
			return 0, err
		}
		if bytes.Contains(line, []byte(`"method":"session/update"`)) {
			f.c.mu.Lock()
			for f.c.queued >= maxQueued {
				f.c.handled.Wait()
			}
			f.c.queued++
			f.c.mu.Unlock()
		}
		f.rest = line
	}
	n := copy(p, f.rest)
	f.rest = f.rest[n:]
	return n, nil
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// TestMain removes the binary the process tests build.
func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// agentBinary builds cmd/hiloop-fake-agent once, static, as the Makefile does.
func agentBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hiloop-fake-agent-test")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "hiloop-fake-agent")
		cmd := exec.Command("go", "build", "-o", binary, "github.com/hiloop/hiloop/cmd/hiloop-fake-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// startProcess runs the built binary with its state in stateDir.
func startProcess(t *testing.T, stateDir string, c *testClient) *peer {
	t.Helper()
	cmd := exec.Command(agentBinary(t))
	cmd.Env = append(os.Environ(), StateEnv+"="+stateDir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{client: c, stdout: &syncBuffer{}, stderr: &syncBuffer{}, stdin: stdin, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait closes stdout only after the client has read it to EOF.
	read := make(chan struct{})
	p.conn = connect(c, stdin, io.TeeReader(readerNotifyEOF{stdout, read}, p.stdout), p.stderr)
	go func() {
		<-read
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Errorf("the fake agent process did not exit when stdin closed")
		}
	})
	return p
}

// readerNotifyEOF closes eof once r has returned an error.
type readerNotifyEOF struct {
	r   io.Reader
	eof chan struct{}
}

func (r readerNotifyEOF) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil {
		select {
		case <-r.eof:
		default:
			close(r.eof)
		}
	}
	return n, err
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (p *peer) initialize(t *testing.T) acp.InitializeResponse {
	t.Helper()
	resp, err := p.conn.Initialize(testContext(t), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return resp
}

func (p *peer) newSession(t *testing.T, cwd string) acp.SessionId {
	t.Helper()
	resp, err := p.conn.NewSession(testContext(t), acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	return resp.SessionId
}

func (p *peer) prompt(t *testing.T, id acp.SessionId, text string) (acp.StopReason, error) {
	t.Helper()
	resp, err := p.conn.Prompt(testContext(t), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
	return resp.StopReason, err
}

// run prompts "run PATH" with a testdata script and expects stop reason want.
func (p *peer) run(t *testing.T, id acp.SessionId, script string, want acp.StopReason) {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.prompt(t, id, "run "+path)
	if err != nil {
		t.Fatalf("run %s: %v; stderr:\n%s", script, err, p.stderr.String())
	}
	if got != want {
		t.Fatalf("run %s: stop reason %q, want %q", script, got, want)
	}
}

// requestError returns err's JSON-RPC error, failing the test when it is not one.
func requestError(t *testing.T, err error) *acp.RequestError {
	t.Helper()
	var re *acp.RequestError
	if !errors.As(err, &re) {
		t.Fatalf("got error %v (%T), want a JSON-RPC error", err, err)
	}
	return re
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
