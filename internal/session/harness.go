package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/hiloop/hiloop/internal/eventlog"
	"github.com/hiloop/hiloop/internal/harness"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// harnessUser is the sandbox user harnesses run as.
const harnessUser = "agent"

// harnessDir is the working directory of a harness process; each session has its own cwd.
const harnessDir = "/workspace"

// maxHarnessLog bounds a harness log; past it the log is rotated to <log>.1 at the next start.
const maxHarnessLog = 32 << 20

type procKey struct{ sandbox, harness string }

// harnessProc is one harness process in a sandbox and the ACP connection to it.
type harnessProc struct {
	svc     *Service
	key     procKey
	logPath string
	proc    runtime.Process
	conn    *acpsdk.ClientSideConnection
	caps    acpsdk.AgentCapabilities
	ctx     context.Context // ends when the process is gone
	stop    context.CancelFunc
	exited  chan struct{} // closed once the process has exited
	exit    runtime.ExitStatus
	exitErr error
	stderr  tailWriter // the end of its stderr, for the error of a harness that died starting

	mu      sync.Mutex
	failure error                       // why the daemon cut the harness off, if it did
	byACP   map[string]string           // ACP session id → session id
	known   map[string]string           // session id → ACP session id, sessions this process serves
	loading map[string]bool             // ACP session ids being loaded: their replayed history is not stored
	stored  map[string]eventlog.Pending // session id → its last update queued for the log
}

// harness returns the live harness process for (sandbox, name), starting one if needed.
func (s *Service) harness(ctx context.Context, sandbox, name string) (*harnessProc, error) {
	key := procKey{sandbox, name}
	s.mu.Lock()
	lock := s.starts[key]
	if lock == nil {
		lock = &sync.Mutex{}
		s.starts[key] = lock
	}
	s.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	s.mu.Lock()
	p := s.procs[key]
	s.mu.Unlock()
	if p != nil && p.ctx.Err() == nil {
		return p, nil
	}
	p, err := s.startHarness(ctx, key)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		p.fail(errors.New("sandboxd is shutting down"))
		return nil, &turnError{msg: "sandboxd is shutting down"}
	}
	s.procs[key] = p
	go func() {
		<-p.ctx.Done()
		s.mu.Lock()
		if s.procs[key] == p {
			delete(s.procs, key)
		}
		s.mu.Unlock()
	}()
	return p, nil
}

// startHarness starts the harness in the sandbox as the agent user, in its own process group
// (an exec is a session of its own), and initializes ACP.
func (s *Service) startHarness(ctx context.Context, key procKey) (*harnessProc, error) {
	ad, err := harness.Lookup(key.harness)
	if err != nil {
		return nil, &turnError{msg: err.Error()}
	}
	logPath := s.harnessLogPath(key.sandbox)
	logf, err := openHarnessLog(logPath)
	if err != nil {
		return nil, &turnError{msg: fmt.Sprintf("open the harness log: %v", err)}
	}
	fmt.Fprintf(logf, "--- %s sandboxd: starting harness %s: %s\n", time.Now().UTC().Format(time.RFC3339), key.harness, strings.Join(ad.Argv, " "))
	genv := s.cfg.Gateway
	release := func() {}
	if s.cfg.Credentials != nil && ad.Install != "" {
		// key.sandbox is the sandbox's key: identity.Split names its owner, whose provider
		// logins its harnesses use.
		sb, err := s.boxes.Get(ctx, key.sandbox)
		if err == nil {
			genv.Keys, release, err = s.cfg.Credentials(sb.ID, key.sandbox, key.harness)
		}
		if err != nil {
			logf.Close()
			return nil, &turnError{msg: fmt.Sprintf("start harness %s in sandbox %s: its model route keys: %v", key.harness, displayName(key.sandbox), err)}
		}
	}
	var env []string
	if ad.Env != nil {
		env = ad.Env(genv)
	}
	proc, err := s.boxes.Exec(ctx, key.sandbox, runtime.ExecSpec{Argv: ad.Argv, Env: env, User: harnessUser, Dir: harnessDir})
	if err != nil {
		release()
		logf.Close()
		return nil, &turnError{msg: fmt.Sprintf("start harness %s in sandbox %s: %v", key.harness, displayName(key.sandbox), err)}
	}
	pctx, stop := context.WithCancel(context.Background())
	p := &harnessProc{
		svc:     s,
		key:     key,
		logPath: logPath,
		proc:    proc,
		ctx:     pctx,
		stop:    stop,
		exited:  make(chan struct{}),
		byACP:   map[string]string{},
		known:   map[string]string{},
		loading: map[string]bool{},
		stored:  map[string]eventlog.Pending{},
	}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(io.MultiWriter(&cappedWriter{w: logf, left: maxHarnessLog}, &p.stderr), proc.Stderr())
	}()
	go func() {
		p.exit, p.exitErr = proc.Wait()
		<-stderrDone
		release() // its keys are worthless from now on
		fmt.Fprintf(logf, "--- %s sandboxd: harness %s %s\n", time.Now().UTC().Format(time.RFC3339), key.harness, p.describeExit())
		logf.Close()
		close(p.exited)
	}()
	stdout := newTap(proc.Stdout(), key.harness, p.storeUpdate, p.fail)
	p.conn = acpsdk.NewClientSideConnection(&client{p: p}, proc.Stdin(), stdout)
	p.conn.SetLogger(s.lg.With("harness", key.harness, "sandbox", key.sandbox))
	go func() {
		// The connection ends when stdout does: the process exited or was cut off.
		<-p.conn.Done()
		stop()
		_ = proc.Kill()
	}()

	ictx, cancel := context.WithTimeout(ctx, initializeTimeout)
	defer cancel()
	resp, err := p.conn.Initialize(ictx, acpsdk.InitializeRequest{
		ProtocolVersion:    acpsdk.ProtocolVersionNumber,
		ClientCapabilities: acpsdk.ClientCapabilities{},
		ClientInfo:         &acpsdk.Implementation{Name: "hiloop", Version: s.cfg.Version},
	})
	if err != nil {
		var reason error // nil: the process died, and its exit says why
		switch {
		case errors.Is(ictx.Err(), context.DeadlineExceeded):
			reason = fmt.Errorf("harness %s did not answer initialize within %s", key.harness, initializeTimeout)
		case !p.gone():
			reason = fmt.Errorf("harness %s refused initialize: %v", key.harness, err)
		}
		p.fail(reason)
		return nil, p.turnError(fmt.Sprintf("harness %s did not start", key.harness), err)
	}
	p.caps = resp.AgentCapabilities
	s.lg.Info("harness started", "sandbox", key.sandbox, "harness", key.harness,
		"load", p.caps.LoadSession, "resume", p.caps.SessionCapabilities.Resume != nil)
	return p, nil
}

// fail cuts the harness off: the process group is killed and the connection ends. reason, if not
// nil, is what turns report instead of the exit status.
func (p *harnessProc) fail(reason error) {
	p.mu.Lock()
	if p.failure == nil && reason != nil {
		p.failure = reason
	}
	p.mu.Unlock()
	_ = p.proc.Kill()
	p.stop()
}

// gone reports whether the connection to the harness has ended.
func (p *harnessProc) gone() bool {
	if p.ctx.Err() != nil {
		return true
	}
	select {
	case <-p.conn.Done():
		return true
	default:
		return false
	}
}

// turnError explains a failed call to the harness: why it was cut off or how it exited when it
// is gone, else the call's own error.
func (p *harnessProc) turnError(what string, err error) error {
	if p.gone() {
		// Let the exit status arrive; the process is gone or going.
		select {
		case <-p.exited:
		case <-time.After(2 * time.Second):
		}
		p.mu.Lock()
		failure := p.failure
		p.mu.Unlock()
		msg := fmt.Sprintf("harness %s %s", p.key.harness, p.exitText())
		if failure != nil {
			msg = failure.Error()
		}
		if said := p.stderr.String(); said != "" {
			msg += "; it said: " + said
		}
		return &turnError{msg: fmt.Sprintf("%s; its log is %s", msg, p.logPath), harnessLog: p.logPath}
	}
	return &turnError{msg: fmt.Sprintf("%s: %v", what, err), harnessLog: p.logPath}
}

func (p *harnessProc) exitText() string {
	select {
	case <-p.exited:
		return p.describeExit()
	default:
		return "stopped answering"
	}
}

// describeExit says how the process ended; only once Wait has returned.
func (p *harnessProc) describeExit() string {
	switch {
	case errors.Is(p.exitErr, runtime.ErrSandboxDied):
		return "stopped with its sandbox"
	case p.exitErr != nil:
		return fmt.Sprintf("ended: %v", p.exitErr)
	case p.exit.Signal != 0:
		return fmt.Sprintf("was killed by signal %d", p.exit.Signal)
	case p.exit.Code == 127:
		return "is not installed in the sandbox (exit code 127: command not found)"
	default:
		return fmt.Sprintf("exited with code %d", p.exit.Code)
	}
}

// attach makes the harness know the session and returns its ACP id: a session this process
// serves already; else session/load when the harness advertises it, else session/resume, else a
// new ACP session and a notice that the context was reset.
func (p *harnessProc) attach(ctx context.Context, rec store.Session) (acpID, notice string, err error) {
	p.mu.Lock()
	id, ok := p.known[rec.ID]
	p.mu.Unlock()
	if ok {
		return id, "", nil
	}
	prev := rec.ACPSessionID
	var why []string
	if prev != "" {
		if p.caps.LoadSession {
			p.register(rec.ID, prev, true)
			_, err := p.conn.LoadSession(ctx, acpsdk.LoadSessionRequest{SessionId: acpsdk.SessionId(prev), Cwd: rec.Cwd, McpServers: []acpsdk.McpServer{}})
			if p.settle(rec.ID, prev, err) {
				return prev, "", nil
			}
			why = append(why, fmt.Sprintf("session/load failed: %v", err))
		}
		if p.caps.SessionCapabilities.Resume != nil && p.ctx.Err() == nil {
			p.register(rec.ID, prev, false)
			_, err := p.conn.ResumeSession(ctx, acpsdk.ResumeSessionRequest{SessionId: acpsdk.SessionId(prev), Cwd: rec.Cwd, McpServers: []acpsdk.McpServer{}})
			if p.settle(rec.ID, prev, err) {
				return prev, "", nil
			}
			why = append(why, fmt.Sprintf("session/resume failed: %v", err))
		}
		if len(why) == 0 {
			why = append(why, "it supports neither session/load nor session/resume")
		}
	}
	resp, err := p.conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: rec.Cwd, McpServers: []acpsdk.McpServer{}})
	if err != nil {
		return "", "", err
	}
	id = string(resp.SessionId)
	p.register(rec.ID, id, false)
	p.settle(rec.ID, id, nil)
	if prev != "" {
		notice = fmt.Sprintf("the context was reset: harness %s could not restore this session (%s), so it started a new one that does not remember the earlier turns", p.key.harness, strings.Join(why, "; "))
	}
	return id, notice, nil
}

// register routes the updates of ACP session acpID to session id; while loading, they are the
// replayed history and are dropped.
func (p *harnessProc) register(id, acpID string, loading bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.byACP[acpID] = id
	if loading {
		p.loading[acpID] = true
	}
}

// settle ends a register: on success the process serves the session.
func (p *harnessProc) settle(id, acpID string, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.loading, acpID)
	if err != nil {
		delete(p.byACP, acpID)
		return false
	}
	p.known[id] = acpID
	return true
}

// forget drops a deleted session.
func (p *harnessProc) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if acpID, ok := p.known[id]; ok {
		delete(p.byACP, acpID)
		delete(p.known, id)
	}
	delete(p.stored, id)
}

// session returns the session an ACP session id belongs to ("" for none).
func (p *harnessProc) session(acpID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byACP[acpID]
}

// cancel sends session/cancel for an ACP session.
func (p *harnessProc) cancel(acpID string) {
	if err := p.conn.Cancel(p.ctx, acpsdk.CancelNotification{SessionId: acpsdk.SessionId(acpID)}); err != nil {
		p.svc.lg.Warn("send session/cancel", "harness", p.key.harness, "sandbox", p.key.sandbox, "err", err)
	}
}

// storeUpdate queues one session/update's update, exactly as received, for its session's log.
// The tap hands it only updates that are JSON objects, checked.
func (p *harnessProc) storeUpdate(acpID string, update json.RawMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loading[acpID] {
		return // history replayed by session/load is stored already
	}
	id := p.byACP[acpID]
	if id == "" {
		p.svc.lg.Debug("dropping an update for an unknown ACP session", "harness", p.key.harness, "acp_session", acpID)
		return
	}
	p.stored[id] = p.svc.log.EnqueueValid(id, api.EventUpdate, bytes.Clone(update)) // the tap checked it
}

// updatesStored waits until every update queued for the session is durable, and says if any
// of the session's events failed to be stored meanwhile.
func (p *harnessProc) updatesStored(id string) error {
	p.mu.Lock()
	last, ok := p.stored[id]
	delete(p.stored, id)
	p.mu.Unlock()
	if ok {
		_, _ = last.Wait()
	}
	return p.svc.log.TakeFailure(id)
}

// cappedWriter writes until left runs out, then drops the rest. It never fails: the harness's
// stderr must be drained, or the harness blocks on it.
// tailWriter keeps the last lines a process wrote (at most tailBytes), so that the error of a
// harness that died can say why in the harness's own words, not only where its log is.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 512

func (t *tailWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - 4*tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

// String returns the last non-empty lines, at most tailBytes, joined by " | ".
func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lines []string
	size := 0
	all := strings.Split(strings.TrimSpace(strings.ToValidUTF8(string(t.buf), "?")), "\n")
	for i := len(all) - 1; i >= 0 && len(lines) < 5; i-- {
		line := strings.TrimSpace(all[i])
		if line == "" {
			continue
		}
		if size+len(line) > tailBytes {
			if len(lines) == 0 {
				lines = append(lines, "…"+strings.ToValidUTF8(line[len(line)-tailBytes:], ""))
			}
			break
		}
		size += len(line)
		lines = append(lines, line)
	}
	slices.Reverse(lines)
	return strings.Join(lines, " | ")
}

type cappedWriter struct {
	w    io.Writer
	left int64
}

func (c *cappedWriter) Write(b []byte) (int, error) {
	if c.left <= 0 {
		return len(b), nil
	}
	n := min(int64(len(b)), c.left)
	c.left -= n
	if _, err := c.w.Write(b[:n]); err != nil {
		c.left = 0 // the log is unwritable: drop the rest
		return len(b), nil
	}
	if c.left == 0 {
		_, _ = io.WriteString(c.w, "\n--- sandboxd: harness log full, the rest of this run's stderr is dropped\n")
	}
	return len(b), nil
}

// openHarnessLog opens a sandbox's harness log for appending, rotating it once it grew too big.
func openHarnessLog(path string) (*os.File, error) {
	if st, err := os.Stat(path); err == nil && st.Size() > maxHarnessLog {
		_ = os.Rename(path, path+".1")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
