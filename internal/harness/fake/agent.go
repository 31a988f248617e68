package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	acp "github.com/coder/acp-go-sdk"
)

// CrashError is what Run returns after a script's crash directive; Main exits with Code.
type CrashError struct {
	// Code is the exit code the script asked for.
	Code int
}

func (e *CrashError) Error() string { return fmt.Sprintf("crash directive: exit code %d", e.Code) }

// Main runs the agent on the process's standard streams with the state directory from StateEnv
// and returns the exit code: 0 when stdin closes, a crash directive's code, 1 on any other error.
func Main() int {
	dir := os.Getenv(StateEnv)
	if dir == "" {
		dir = DefaultStateDir
	}
	err := Run(context.Background(), dir, os.Stdin, os.Stdout, os.Stderr)
	var crash *CrashError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &crash):
		return crash.Code
	default:
		fmt.Fprintf(os.Stderr, "hiloop-fake-agent: %v\n", err)
		return 1
	}
}

// Run serves ACP on stdin and stdout, with diagnostics on stderr and state in stateDir. It
// returns nil when stdin closes, ctx's error when ctx ends, and a *CrashError when a script
// crashes; after a crash nothing more is written to stdout.
func Run(ctx context.Context, stateDir string, stdin io.Reader, stdout, stderr io.Writer) error {
	st := store{dir: stateDir}
	cfg, err := st.config()
	if err != nil {
		return err
	}
	errw := &lineWriter{w: stderr}
	a := &agent{
		store:    st,
		cfg:      cfg,
		stdout:   &lineWriter{w: stdout},
		stderr:   errw,
		log:      slog.New(slog.NewTextHandler(errw, nil)),
		crashed:  make(chan int, 1),
		sessions: make(map[acp.SessionId]*session),
	}
	ready := make(chan struct{})
	a.conn = acp.NewAgentSideConnection(a, a.stdout, gatedReader{r: stdin, ready: ready})
	a.conn.SetLogger(a.log)
	close(ready)
	a.log.Info("started", "state", stateDir, "load", cfg.Load, "resume", cfg.Resume)

	select {
	case <-a.conn.Done():
		return nil
	case code := <-a.crashed:
		return &CrashError{Code: code}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gatedReader holds the SDK's first read until the connection is set up, so that its goroutines
// see the logger and the agent's handlers see a.conn.
type gatedReader struct {
	r     io.Reader
	ready <-chan struct{}
}

func (g gatedReader) Read(p []byte) (int, error) {
	<-g.ready
	return g.r.Read(p)
}

// lineWriter serialises writes to one stream, so that the SDK's messages and a garbage line
// never interleave mid-line; after close (a crash) every write fails.
//
// It can also hold lines back (hold) and write many at once: a chatty script's text chunks
// cost a write each otherwise, the larger part of what the agent spends on one, and as much
// again for the reader woken for each. Held lines are written once they fill holdBytes, before
// anything else is written (by Write), and by flush, which the agent calls before anything that
// may wait (every step but a text chunk, and the end of a turn); so no line is held while the
// agent waits, and the stream's order is the order of the calls.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	held   []byte
	closed bool
}

// holdBytes is how much hold keeps back before it writes: a fraction of a pipe's 64 KiB.
const holdBytes = 16 << 10

var errCrashed = errors.New("the agent crashed")

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, errCrashed
	}
	if len(l.held) == 0 {
		return l.w.Write(p)
	}
	l.held = append(l.held, p...) // one write for both
	if err := l.writeHeld(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// hold queues a whole line to be written later: see lineWriter.
func (l *lineWriter) hold(line []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errCrashed
	}
	l.held = append(l.held, line...)
	if len(l.held) < holdBytes {
		return nil
	}
	return l.writeHeld()
}

// flush writes the lines held back.
func (l *lineWriter) flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errCrashed
	}
	return l.writeHeld()
}

func (l *lineWriter) writeHeld() error {
	if len(l.held) == 0 {
		return nil
	}
	_, err := l.w.Write(l.held)
	l.held = l.held[:0]
	return err
}

// close writes the lines held back, waits for a write in progress, so the last line is whole,
// and refuses the rest.
func (l *lineWriter) close() {
	l.mu.Lock()
	_ = l.writeHeld()
	l.closed = true
	l.mu.Unlock()
}

// agent implements acp.Agent and acp.AgentLoader.
type agent struct {
	conn    *acp.AgentSideConnection
	store   store
	cfg     Config
	stdout  *lineWriter
	stderr  *lineWriter
	log     *slog.Logger
	crashed chan int

	mu       sync.Mutex
	sessions map[acp.SessionId]*session // known to this process
}

// session is a session this process knows; mu is held for a whole turn, one turn at a time.
type session struct {
	mu  sync.Mutex
	rec record
}

var (
	_ acp.Agent       = (*agent)(nil)
	_ acp.AgentLoader = (*agent)(nil)
)

// errNotFound is ACP's "Resource not found", which clients take as "restore this session".
func errNotFound(id acp.SessionId) error {
	return &acp.RequestError{Code: -32002, Message: fmt.Sprintf("session %s not found", id),
		Data: map[string]any{"sessionId": id}}
}

func (a *agent) crash(code int) {
	a.stdout.close()
	select {
	case a.crashed <- code:
	default:
	}
}

func (a *agent) Initialize(ctx context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	caps := acp.AgentCapabilities{LoadSession: a.cfg.Load}
	if a.cfg.Resume {
		caps.SessionCapabilities.Resume = &acp.SessionResumeCapabilities{}
	}
	return acp.InitializeResponse{
		ProtocolVersion:   acp.ProtocolVersionNumber,
		AgentInfo:         &acp.Implementation{Name: "hiloop-fake-agent", Version: "1"},
		AgentCapabilities: caps,
		AuthMethods:       []acp.AuthMethod{},
	}, nil
}

func (a *agent) Authenticate(ctx context.Context, p acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

func (a *agent) NewSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	rec := record{ID: newSessionID(), Cwd: p.Cwd, Turns: []turnRecord{}}
	if err := a.store.save(rec); err != nil {
		return acp.NewSessionResponse{}, err
	}
	a.mu.Lock()
	a.sessions[acp.SessionId(rec.ID)] = &session{rec: rec}
	a.mu.Unlock()
	a.log.Info("session created", "session", rec.ID, "cwd", rec.Cwd)
	return acp.NewSessionResponse{SessionId: acp.SessionId(rec.ID)}, nil
}

// restore returns a session this process knows, or reads it from the state directory.
func (a *agent) restore(id acp.SessionId) (*session, error) {
	a.mu.Lock()
	s := a.sessions[id]
	a.mu.Unlock()
	if s != nil {
		return s, nil
	}
	rec, ok, err := a.store.load(string(id))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errNotFound(id)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[id]; s != nil {
		return s, nil
	}
	s = &session{rec: rec}
	a.sessions[id] = s
	return s, nil
}

// moveTo records the cwd a load or resume names; the caller holds s.mu.
func (a *agent) moveTo(s *session, cwd string) error {
	if cwd == "" || cwd == s.rec.Cwd {
		return nil
	}
	s.rec.Cwd = cwd
	return a.store.save(s.rec)
}

func (a *agent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	if !a.cfg.Load {
		return acp.LoadSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionLoad)
	}
	s, err := a.restore(p.SessionId)
	if err != nil {
		return acp.LoadSessionResponse{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := a.moveTo(s, p.Cwd); err != nil {
		return acp.LoadSessionResponse{}, err
	}
	for _, t := range s.rec.Turns {
		updates := []acp.SessionUpdate{acp.UpdateUserMessageText(t.Prompt)}
		for _, r := range t.Replies {
			updates = append(updates, acp.UpdateAgentMessageText(r))
		}
		for _, u := range updates {
			if err := a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: u}); err != nil {
				return acp.LoadSessionResponse{}, err
			}
		}
	}
	a.log.Info("session loaded", "session", p.SessionId, "turns", len(s.rec.Turns))
	return acp.LoadSessionResponse{}, nil
}

func (a *agent) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	if !a.cfg.Resume {
		return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
	}
	s, err := a.restore(p.SessionId)
	if err != nil {
		return acp.ResumeSessionResponse{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := a.moveTo(s, p.Cwd); err != nil {
		return acp.ResumeSessionResponse{}, err
	}
	a.log.Info("session resumed", "session", p.SessionId)
	return acp.ResumeSessionResponse{}, nil
}

func (a *agent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	a.mu.Lock()
	s := a.sessions[p.SessionId]
	a.mu.Unlock()
	if s == nil {
		return acp.PromptResponse{}, errNotFound(p.SessionId)
	}
	s.mu.Lock()
	defer s.mu.Unlock()

	text := promptText(p.Prompt)
	t := &turn{ctx: ctx, a: a, session: p.SessionId, tools: make(map[string]step), denied: make(map[string]bool)}
	reason, err := t.run(text, s.rec.Cwd)
	if errors.Is(err, errCrashed) {
		return acp.PromptResponse{}, err // nobody will read it
	}
	if ferr := a.stdout.flush(); ferr != nil && err == nil {
		err = ferr // the SDK's answer will not get through either
	}
	s.rec.Turns = append(s.rec.Turns, turnRecord{Prompt: text, Replies: t.replies})
	if serr := a.store.save(s.rec); serr != nil && err == nil {
		err = serr
	}
	a.log.Info("turn ended", "session", p.SessionId, "stopReason", reason, "err", err)
	if err != nil {
		var re *acp.RequestError
		if errors.As(err, &re) {
			return acp.PromptResponse{}, re
		}
		// The message carries the cause (e.g. FILE:LINE), not just "Internal error".
		return acp.PromptResponse{}, &acp.RequestError{Code: -32603, Message: err.Error()}
	}
	return acp.PromptResponse{StopReason: reason}, nil
}

// promptText is the first text block of a prompt, trimmed.
func promptText(blocks []acp.ContentBlock) string {
	for _, b := range blocks {
		if b.Text != nil {
			return strings.TrimSpace(b.Text.Text)
		}
	}
	return ""
}

// Cancel needs nothing more: the SDK cancels the running prompt's context before calling it.
func (a *agent) Cancel(ctx context.Context, p acp.CancelNotification) error {
	a.log.Info("cancel", "session", p.SessionId)
	return nil
}

func (a *agent) ListSessions(ctx context.Context, p acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (a *agent) CloseSession(ctx context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionClose)
}

func (a *agent) SetSessionMode(ctx context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetMode)
}

func (a *agent) SetSessionConfigOption(ctx context.Context, p acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}
