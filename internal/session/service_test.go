package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/eventlog"
	"github.com/hiloop/hiloop/internal/harness/fake"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
)

// These tests run the real fake harness binary as a local process group and speak real ACP to it
// over pipes; only the sandbox is stood in for (the e2e scripts run it in real sandboxes).

var fakeAgent string // the built hiloop-fake-agent

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "session-test")
	if err != nil {
		panic(err)
	}
	fakeAgent = filepath.Join(dir, "hiloop-fake-agent")
	out, err := exec.Command("go", "build", "-o", fakeAgent, "github.com/hiloop/hiloop/cmd/hiloop-fake-agent").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build the fake agent: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// localBoxes stands in for the sandbox manager: one "sandbox" whose harness runs on the host.
type localBoxes struct {
	dir    string // the sandbox's /workspace
	policy api.PermissionPolicy
	image  string // the sandbox's image; "" for minimal

	startGate chan struct{} // if set, Start waits for it
	getGate   chan struct{} // if set, Get waits for it

	mu      sync.Mutex
	id      string // the sandbox's id when not "id-box": another sandbox named box
	gone    bool   // deleted
	running bool
	starts  int
	execs   int
	procs   []*localProc
}

func (b *localBoxes) Get(_ context.Context, name string) (api.Sandbox, error) {
	b.mu.Lock()
	gate := b.getGate
	b.mu.Unlock()
	if gate != nil {
		<-gate
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if name != "box" || b.gone {
		return api.Sandbox{}, api.Errorf(api.CodeSandboxNotFound, "sandbox %q not found", name)
	}
	state := api.StateStopped
	if b.running {
		state = api.StateRunning
	}
	id := "id-box"
	if b.id != "" {
		id = b.id
	}
	image := "minimal"
	if b.image != "" {
		image = b.image
	}
	return api.Sandbox{Name: name, ID: id, State: state, PermissionPolicy: b.policy, Image: image}, nil
}

// testImages stands in for the image store: the built images and the harnesses they carry.
type testImages map[string][]string

func (t testImages) Get(name string) (images.Image, error) {
	hs, ok := t[name]
	if !ok {
		return images.Image{}, fmt.Errorf("image %s: %w", name, images.ErrNotBuilt)
	}
	img := images.Image{Name: name}
	for _, h := range hs {
		img.Harnesses = append(img.Harnesses, images.Harness{Name: h, Version: "1.0.0"})
	}
	return img, nil
}

func (t testImages) DefinitionsWith(harness string) []string {
	var out []string
	for name, hs := range t {
		if slices.Contains(hs, harness) {
			out = append(out, name)
		}
	}
	return out
}

// builtImages are the images of the tests' sandboxes.
var builtImages = testImages{"minimal": nil, "agents": {"claude-code", "codex", "opencode"}}

func (b *localBoxes) Start(ctx context.Context, name string) (api.Sandbox, error) {
	if b.startGate != nil {
		<-b.startGate
	}
	b.mu.Lock()
	b.running = true
	b.starts++
	b.mu.Unlock()
	return b.Get(ctx, name)
}

func (b *localBoxes) Exec(_ context.Context, name string, spec runtime.ExecSpec) (runtime.Process, error) {
	if spec.Argv[0] != fake.Path {
		return nil, fmt.Errorf("unexpected harness %q", spec.Argv[0])
	}
	cmd := exec.Command(fakeAgent)
	cmd.Env = append(os.Environ(), append(spec.Env, fake.StateEnv+"="+filepath.Join(b.dir, ".fake-agent"))...)
	cmd.Dir = b.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &localProc{cmd: cmd}
	var child [3]*os.File
	var err error
	if child[0], p.stdin, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.stdout, child[1], err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.stderr, child[2], err = os.Pipe(); err != nil {
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = child[0], child[1], child[2]
	err = cmd.Start()
	for _, f := range child {
		f.Close()
	}
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.execs++
	b.procs = append(b.procs, p)
	b.mu.Unlock()
	return p, nil
}

// delete deletes the sandbox the way the manager does, before it tells the session service.
func (b *localBoxes) delete() {
	b.stop()
	b.mu.Lock()
	b.gone = true
	b.mu.Unlock()
}

func (b *localBoxes) stop() {
	b.mu.Lock()
	b.running = false
	procs := b.procs
	b.procs = nil
	b.mu.Unlock()
	for _, p := range procs {
		_ = p.Kill()
	}
}

type localProc struct {
	cmd            *exec.Cmd
	stdin          *os.File
	stdout, stderr *os.File
	waitOnce       sync.Once
	status         runtime.ExitStatus
	waitErr        error
}

func (p *localProc) Stdin() io.WriteCloser    { return p.stdin }
func (p *localProc) Stdout() io.Reader        { return p.stdout }
func (p *localProc) Stderr() io.Reader        { return p.stderr }
func (p *localProc) Resize(_, _ uint16) error { return nil }
func (p *localProc) Signal(sig int) error     { return p.cmd.Process.Signal(syscall.Signal(sig)) }
func (p *localProc) Kill() error              { return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

func (p *localProc) Wait() (runtime.ExitStatus, error) {
	p.waitOnce.Do(func() {
		err := p.cmd.Wait()
		p.stdin.Close()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			ws := exit.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				p.status.Signal = int(ws.Signal())
			} else {
				p.status.Code = ws.ExitStatus()
			}
		} else if err != nil {
			p.waitErr = err
		}
	})
	return p.status, p.waitErr
}

type testEnv struct {
	t      testing.TB
	dbPath string
	boxes  *localBoxes
	st     *store.Store
	log    *eventlog.Log
	limits eventlog.Limits // of the log; none unless a test sets them before open
	svc    *Service
	logDir string
}

func newEnv(t testing.TB) *testEnv {
	t.Helper()
	e := &testEnv{
		t:      t,
		dbPath: filepath.Join(t.TempDir(), "sandboxd.db"),
		boxes:  &localBoxes{dir: t.TempDir(), policy: api.PolicyAutoApprove, running: true},
		logDir: t.TempDir(),
	}
	e.open()
	t.Cleanup(func() {
		e.close()
		e.boxes.stop()
	})
	return e
}

// open starts a "daemon" over the env's database.
func (e *testEnv) open() {
	e.t.Helper()
	var err error
	if e.st, err = store.Open(e.dbPath); err != nil {
		e.t.Fatal(err)
	}
	e.log, err = eventlog.Open(filepath.Join(filepath.Dir(e.dbPath), "events.db"), eventlog.Config{
		Limits: e.limits,
		SandboxOf: func(id string) string {
			rec, _ := e.st.GetSession(id)
			return rec.SandboxID
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.svc = New(Config{
		Store: e.st, Log: e.log, Sandboxes: e.boxes, LogDir: e.logDir, Version: "test",
		Images: builtImages, Provided: []string{fake.Name},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := e.svc.Recover(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// close stops the "daemon" the way a shutdown does.
func (e *testEnv) close() {
	if e.svc == nil {
		return
	}
	e.svc.Close()
	e.log.Close()
	e.st.Close()
	e.svc = nil
}

func (e *testEnv) create(policy api.PermissionPolicy) string {
	e.t.Helper()
	se, err := e.svc.Create(context.Background(), api.SessionsPost{Sandbox: "box", Harness: "fake", Cwd: e.boxes.dir, PermissionPolicy: policy})
	if err != nil {
		e.t.Fatal(err)
	}
	return se.ID
}

// script writes a fake harness script into the workspace and returns the prompt that runs it.
func (e *testEnv) script(name, body string) string {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.boxes.dir, name), []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return "run " + name
}

// prompt sends text and returns the prompt's seq.
func (e *testEnv) prompt(id, text string) uint64 {
	e.t.Helper()
	acc, err := e.svc.Prompt(context.Background(), id, text)
	if err != nil {
		e.t.Fatalf("prompt %q: %v", text, err)
	}
	return acc.Seq
}

// until streams the session's events after seq after until one satisfies stop, and returns them.
// Cut off as slow, it reconnects from its last seq, as every watcher must.
func (e *testEnv) until(id string, after uint64, stop func(api.SessionEvent) bool) []api.SessionEvent {
	e.t.Helper()
	sub, err := e.svc.Subscribe(id, after)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { sub.Close() }()
	var out []api.SessionEvent
	timeout := testenv.Deadline(e.t)
	for {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				if !errors.Is(sub.Err(), eventlog.ErrSlow) {
					e.t.Fatalf("stream ended: %v (after %d events)", sub.Err(), len(out))
				}
				sub, err = e.svc.Subscribe(id, after)
				if err != nil {
					e.t.Fatal(err)
				}
				continue
			}
			if ev.Seq != after+1 {
				e.t.Fatalf("event %d follows %d", ev.Seq, after)
			}
			after = ev.Seq
			out = append(out, ev.SessionEvent)
			if stop(ev.SessionEvent) {
				return out
			}
		case <-timeout:
			e.t.Fatalf("no end after 30s; got %s", summary(out))
		}
	}
}

func isTurnEnd(ev api.SessionEvent) bool { return ev.Type == api.EventTurnEnd }

// turn prompts and returns the turn's events, prompt to turn_end.
func (e *testEnv) turn(id, text string) []api.SessionEvent {
	e.t.Helper()
	seq := e.prompt(id, text)
	return e.until(id, seq-1, isTurnEnd)
}

// summary renders events as "type[:detail]" for comparisons and failure messages, with the values
// as they are on the wire: the tests' expectations spell out what clients receive.
func summary(evs []api.SessionEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = string(ev.Type)
		switch ev.Type {
		case api.EventUpdate:
			var u struct {
				SessionUpdate string `json:"sessionUpdate"`
				Content       struct {
					Text string `json:"text"`
				} `json:"content"`
				Status string `json:"status"`
			}
			_ = json.Unmarshal(ev.Data, &u)
			out[i] += ":" + u.SessionUpdate
			if u.Content.Text != "" {
				out[i] += ":" + u.Content.Text
			}
			if u.Status != "" {
				out[i] += ":" + u.Status
			}
		case api.EventTurnEnd:
			var d api.TurnEndData
			_ = json.Unmarshal(ev.Data, &d)
			out[i] += ":" + string(d.StopReason)
		case api.EventPermissionResolved:
			var d api.PermissionDecision
			_ = json.Unmarshal(ev.Data, &d)
			out[i] += ":" + string(d.Outcome) + ":" + d.Kind + ":" + string(d.By)
		case api.EventPermission:
			var d api.PermissionData
			_ = json.Unmarshal(ev.Data, &d)
			out[i] += ":" + d.ToolCallID + ":" + string(d.Policy)
		}
	}
	return out
}

func expect(t *testing.T, evs []api.SessionEvent, want ...string) {
	t.Helper()
	got := summary(evs)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func data[T any](t *testing.T, ev api.SessionEvent) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ev.Data, &v); err != nil {
		t.Fatalf("decode %s event %d: %v", ev.Type, ev.Seq, err)
	}
	return v
}

func apiCode(err error) api.ErrorCode {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return ""
}

func waitState(t *testing.T, svc *Service, id string, want api.SessionState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		se, err := svc.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if se.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session state %s, want %s", se.State, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const toolScript = `message I will edit README.md
tool call-1 edit Edit README.md
permission call-1
tool_update call-1 completed wrote 3 lines
message done
`

func TestTextTurnStartsTheSandboxAndTheHarnessOnce(t *testing.T) {
	e := newEnv(t)
	e.boxes.running = false
	id := e.create("")
	expect(t, e.turn(id, "hello"), "prompt", "update:agent_message_chunk:echo: hello", "turn_end:end_turn")
	expect(t, e.turn(id, "again"), "prompt", "update:agent_message_chunk:echo: again", "turn_end:end_turn")
	other := e.create("")
	expect(t, e.turn(other, "hi"), "prompt", "update:agent_message_chunk:echo: hi", "turn_end:end_turn")
	if e.boxes.starts != 1 || e.boxes.execs != 1 {
		t.Fatalf("sandbox started %d times, harness %d times; want 1 and 1 (one harness serves the sandbox)", e.boxes.starts, e.boxes.execs)
	}
	se, err := e.svc.Get(context.Background(), id)
	if err != nil || se.State != api.SessionIdle || se.LastSeq != 6 || se.ACPSessionID == "" {
		t.Fatalf("session = %+v, %v", se, err)
	}
}

func TestToolCallAutoApprovedByKind(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	evs := e.turn(id, e.script("tool.fake", toolScript))
	expect(t, evs, "prompt",
		"update:agent_message_chunk:I will edit README.md",
		"update:tool_call:pending",
		"permission:call-1:auto-approve",
		"permission_resolved:selected:allow_once:auto-approve",
		"update:tool_call_update:completed",
		"update:agent_message_chunk:done",
		"turn_end:end_turn")
	perm := data[api.PermissionData](t, evs[3])
	if perm.Title != "Edit README.md" || len(perm.Options) != 3 {
		t.Fatalf("permission = %+v", perm)
	}
	if res := data[api.PermissionDecision](t, evs[4]); res.OptionID != "opt-yes" {
		t.Fatalf("auto-approve chose option %q, want the allow_once option opt-yes", res.OptionID)
	}
	// Answering a decided request the same way returns the decision; differently is a conflict.
	dec, err := e.svc.Answer(context.Background(), id, "call-1", api.PermissionAnswer{Kind: api.OptionAllowOnce})
	if err != nil || dec.By != api.ResolvedByAutoApprove {
		t.Fatalf("repeat answer = %+v, %v", dec, err)
	}
	if _, err := e.svc.Answer(context.Background(), id, "call-1", api.PermissionAnswer{Kind: api.OptionRejectOnce}); apiCode(err) != api.CodePermissionDecided {
		t.Fatalf("conflicting answer: %v, want permission_decided", err)
	}
}

func TestAskPolicyWaitsForAnOperator(t *testing.T) {
	for _, tc := range []struct {
		kind string
		want []string
	}{
		{api.OptionAllowOnce, []string{"permission_resolved:selected:allow_once:operator", "update:tool_call_update:completed", "update:agent_message_chunk:done", "turn_end:end_turn"}},
		{api.OptionRejectOnce, []string{"permission_resolved:selected:reject_once:operator", "update:agent_message_chunk:permission denied for call-1", "update:tool_call_update:failed", "update:agent_message_chunk:done", "turn_end:end_turn"}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			e := newEnv(t)
			e.boxes.policy = api.PolicyAsk // the sandbox's policy applies
			id := e.create("")
			seq := e.prompt(id, e.script("tool.fake", toolScript))
			evs := e.until(id, seq-1, func(ev api.SessionEvent) bool { return ev.Type == api.EventPermission })
			expect(t, evs, "prompt", "update:agent_message_chunk:I will edit README.md", "update:tool_call:pending", "permission:call-1:ask")
			waitState(t, e.svc, id, api.SessionWaiting)
			if _, err := e.svc.Prompt(context.Background(), id, "hi"); apiCode(err) != api.CodeTurnInProgress {
				t.Fatalf("prompt during a turn: %v, want turn_in_progress", err)
			}
			if _, err := e.svc.Answer(context.Background(), id, "nope", api.PermissionAnswer{Kind: tc.kind}); apiCode(err) != api.CodePermissionNotFound {
				t.Fatalf("answer to an unknown request: %v, want permission_not_found", err)
			}
			if _, err := e.svc.Answer(context.Background(), id, "call-1", api.PermissionAnswer{Kind: "allow"}); apiCode(err) != api.CodeInvalidArgument {
				t.Fatalf("answer with a bad kind: %v, want invalid_argument", err)
			}
			if _, err := e.svc.Answer(context.Background(), id, "call-1", api.PermissionAnswer{Kind: api.OptionRejectAlways}); apiCode(err) != api.CodeInvalidArgument {
				t.Fatalf("answer with a kind not offered: %v, want invalid_argument", err)
			}
			if _, err := e.svc.Answer(context.Background(), id, "call-1", api.PermissionAnswer{Kind: tc.kind, Operator: "alice\x1b[2J"}); apiCode(err) != api.CodeInvalidArgument {
				t.Fatalf("answer with an unprintable operator: %v, want invalid_argument", err)
			}
			dec, err := e.svc.Answer(context.Background(), id, "call-1", api.PermissionAnswer{Kind: tc.kind, Operator: "alice@laptop"})
			if err != nil || dec.Kind != tc.kind || dec.By != api.ResolvedByOperator || dec.Operator != "alice@laptop" {
				t.Fatalf("answer = %+v, %v", dec, err)
			}
			// The same answer from someone else returns the first decision, naming who made it.
			again, err := e.svc.Answer(context.Background(), id, "call-1", api.PermissionAnswer{Kind: tc.kind, Operator: "bob@desk"})
			if err != nil || again != dec {
				t.Fatalf("repeated answer = %+v, %v; want the first decision %+v", again, err, dec)
			}
			rest := e.until(id, evs[len(evs)-1].Seq, isTurnEnd)
			expect(t, rest, tc.want...)
			if res := data[api.PermissionDecision](t, rest[0]); res != dec {
				t.Fatalf("permission_resolved = %+v, want the answer's decision %+v", res, dec)
			}
		})
	}
}

func TestSessionPolicyOverridesTheSandboxs(t *testing.T) {
	e := newEnv(t)
	e.boxes.policy = api.PolicyAsk
	id := e.create(api.PolicyAutoApprove)
	evs := e.turn(id, e.script("tool.fake", toolScript))
	if got := summary(evs)[4]; got != "permission_resolved:selected:allow_once:auto-approve" {
		t.Fatalf("event 5 = %s", got)
	}
}

func TestCancelMidPermission(t *testing.T) {
	e := newEnv(t)
	id := e.create(api.PolicyAsk)
	seq := e.prompt(id, e.script("tool.fake", toolScript))
	e.until(id, seq-1, func(ev api.SessionEvent) bool { return ev.Type == api.EventPermission })
	waitState(t, e.svc, id, api.SessionWaiting)
	if _, err := e.svc.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	expect(t, e.until(id, seq+3, isTurnEnd), "permission_resolved:cancelled::cancel", "turn_end:cancelled")
	if _, err := e.svc.Answer(context.Background(), id, "call-1", api.PermissionAnswer{Kind: api.OptionAllowOnce}); apiCode(err) != api.CodePermissionDecided {
		t.Fatalf("answer after cancel: %v, want permission_decided", err)
	}
	// The session goes on.
	expect(t, e.turn(id, "next"), "prompt", "update:agent_message_chunk:echo: next", "turn_end:end_turn")
}

func TestCancelMidTurn(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	seq := e.prompt(id, e.script("slow.fake", "message working\nsleep 1m\nmessage never\n"))
	e.until(id, seq-1, func(ev api.SessionEvent) bool { return ev.Type == api.EventUpdate })
	if _, err := e.svc.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// Uncancelled, the script would sleep a minute and end with end_turn.
	expect(t, e.until(id, seq+1, isTurnEnd), "turn_end:cancelled")
	if _, err := e.svc.Cancel(context.Background(), id); err != nil {
		t.Fatalf("cancel of an idle session: %v", err)
	}
}

func TestHarnessCrashEndsTheTurnAndRestarts(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	expect(t, e.turn(id, "first"), "prompt", "update:agent_message_chunk:echo: first", "turn_end:end_turn")
	evs := e.turn(id, e.script("crash.fake", "message going down\ncrash 3\n"))
	expect(t, evs, "prompt", "update:agent_message_chunk:going down", "error", "turn_end:error")
	er := data[api.ErrorData](t, evs[2])
	if !strings.Contains(er.Message, "exited with code 3") || er.HarnessLog != filepath.Join(e.logDir, "box.log") {
		t.Fatalf("error = %+v", er)
	}
	// The next prompt starts a new harness, which loads the session: no notice, no replayed history.
	expect(t, e.turn(id, "after"), "prompt", "update:agent_message_chunk:echo: after", "turn_end:end_turn")
	if e.boxes.execs != 2 {
		t.Fatalf("harness started %d times, want 2", e.boxes.execs)
	}
}

func TestGarbageCutsTheHarnessOff(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	evs := e.turn(id, e.script("garbage.fake", "message hi\ngarbage this is not json\nsleep 1m\n"))
	expect(t, evs, "prompt", "update:agent_message_chunk:hi", "error", "turn_end:error")
	er := data[api.ErrorData](t, evs[2])
	logPath := filepath.Join(e.logDir, "box.log")
	if !strings.Contains(er.Message, "not ACP") || !strings.Contains(er.Message, "this is not json") || !strings.Contains(er.Message, logPath) || er.HarnessLog != logPath {
		t.Fatalf("error = %+v", er)
	}
	b, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(b), "starting harness fake") {
		t.Fatalf("harness log: %q, %v", b, err)
	}
}

func TestFailedPromptIsAnError(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	evs := e.turn(id, e.script("fail.fake", "fail the model is down\n"))
	expect(t, evs, "prompt", "error", "turn_end:error")
	if er := data[api.ErrorData](t, evs[1]); !strings.Contains(er.Message, "the model is down") {
		t.Fatalf("error = %+v", er)
	}
	expect(t, e.turn(id, "ok"), "prompt", "update:agent_message_chunk:echo: ok", "turn_end:end_turn")
}

func TestRestoreWithoutLoadOrResumeResetsTheContext(t *testing.T) {
	for _, tc := range []struct {
		config string
		notice bool
	}{
		{`{"load": true, "resume": false}`, false},
		{`{"load": false, "resume": true}`, false},
		{`{"load": false, "resume": false}`, true},
	} {
		t.Run(tc.config, func(t *testing.T) {
			e := newEnv(t)
			if err := os.MkdirAll(filepath.Join(e.boxes.dir, ".fake-agent"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(e.boxes.dir, ".fake-agent", "config.json"), []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			id := e.create("")
			e.turn(id, "one")
			e.boxes.stop() // the sandbox stops: its harness goes
			e.svc.SandboxStopped("box")
			evs := e.turn(id, "two")
			want := []string{"prompt", "update:agent_message_chunk:echo: two", "turn_end:end_turn"}
			if tc.notice {
				want = []string{"prompt", "notice", "update:agent_message_chunk:echo: two", "turn_end:end_turn"}
				if n := data[api.NoticeData](t, evs[1]); !strings.Contains(n.Message, "context was reset") {
					t.Fatalf("notice = %q", n.Message)
				}
			}
			expect(t, evs, want...)
		})
	}
}

func TestDaemonRestartMidTurn(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	e.turn(id, "remember me")
	seq := e.prompt(id, e.script("slow.fake", "message working\nsleep 1m\n"))
	e.until(id, seq-1, func(ev api.SessionEvent) bool { return ev.Type == api.EventUpdate })
	// A hard stop: nothing records the turn's end, the harness dies with the daemon.
	e.boxes.stop()
	e.boxes.running = true
	e.svc = nil
	e.log.Close()
	e.st.Close()

	e.open()
	evs := e.until(id, seq+1, isTurnEnd)
	expect(t, evs, "error", "turn_end:error")
	// The next prompt loads the session into a new harness; the replayed history is not stored.
	expect(t, e.turn(id, "still there?"), "prompt", "update:agent_message_chunk:echo: still there?", "turn_end:end_turn")
	all, err := e.svc.Events(id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range all {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
}

func TestChattyTurnIsStoredInOrder(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	const n = 10000
	evs := e.turn(id, e.script("chatty.fake", fmt.Sprintf("repeat %d message chunk {i}\n", n)))
	if len(evs) != n+2 {
		t.Fatalf("%d events, want %d", len(evs), n+2)
	}
	for i := 1; i <= n; i++ {
		if got := summary(evs[i : i+1])[0]; got != fmt.Sprintf("update:agent_message_chunk:chunk %d", i) {
			t.Fatalf("event %d = %s", i, got)
		}
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		p    api.SessionsPost
		code api.ErrorCode
	}{
		{api.SessionsPost{Sandbox: "nope", Harness: "fake"}, api.CodeSandboxNotFound},
		{api.SessionsPost{Sandbox: "box", Harness: "gpt-9"}, api.CodeHarnessNotFound},
		{api.SessionsPost{Sandbox: "box", Harness: "fake", Cwd: "relative"}, api.CodeInvalidArgument},
		{api.SessionsPost{Sandbox: "box", Harness: "fake", PermissionPolicy: "yolo"}, api.CodeInvalidArgument},
		{api.SessionsPost{Sandbox: "Box!", Harness: "fake"}, api.CodeInvalidName},
	} {
		if _, err := e.svc.Create(ctx, tc.p); apiCode(err) != tc.code {
			t.Errorf("create %+v: %v, want %s", tc.p, err, tc.code)
		}
	}
	if _, err := e.svc.Prompt(ctx, "unknown", "hi"); apiCode(err) != api.CodeSessionNotFound {
		t.Errorf("prompt to an unknown session: %v", err)
	}
	if _, err := e.svc.Prompt(ctx, "../etc", "hi"); apiCode(err) != api.CodeSessionNotFound {
		t.Errorf("prompt to a malformed id: %v", err)
	}
	id := e.create("")
	if _, err := e.svc.Prompt(ctx, id, ""); apiCode(err) != api.CodeInvalidArgument {
		t.Errorf("empty prompt: %v", err)
	}
	if _, err := e.svc.Answer(ctx, id, "x", api.PermissionAnswer{Kind: api.OptionAllowOnce}); apiCode(err) != api.CodePermissionNotFound {
		t.Errorf("answer with no request: %v", err)
	}
	if evs, _ := e.svc.Events(id, 0, 0); len(evs) != 0 {
		t.Errorf("bad prompts left %d events", len(evs))
	}
}

func TestCreatePicksAHarnessTheSandboxHas(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, image string
		provided    []string
		harness     string
		want        string        // the session's harness
		code        api.ErrorCode // or the error
		msg         []string      // which the message contains
	}{
		{"agents, none named", "agents", []string{"fake"}, "", "claude-code", "", nil},
		{"agents, one named", "agents", []string{"fake"}, "opencode", "opencode", "", nil},
		{"agents, fake named", "agents", []string{"fake"}, "fake", "fake", "", nil},
		{"minimal, none named: the fake only by name", "minimal", []string{"fake"}, "", "", api.CodeHarnessNotInImage,
			[]string{`sandbox "box" has no harness to run: its image "minimal" carries none`, "--image agents"}},
		{"minimal, fake named", "minimal", []string{"fake"}, "fake", "fake", "", nil},
		{"minimal, one it lacks", "minimal", []string{"fake"}, "codex", "", api.CodeHarnessNotInImage,
			[]string{`harness codex is not in image "minimal" of sandbox "box"`, "--image agents", "hiloop image build agents"}},
		{"no harness at all", "minimal", nil, "", "", api.CodeHarnessNotInImage,
			[]string{`sandbox "box" has no harness to run: its image "minimal" carries none`, "--image agents"}},
		{"fake not provided", "agents", nil, "fake", "", api.CodeHarnessNotInImage, []string{"harness fake comes with sandboxd", "--fake-agent-path"}},
		{"image not built", "gone", []string{"fake"}, "fake", "", api.CodeImageNotFound, []string{"hiloop image build gone"}},
		{"unknown harness", "agents", []string{"fake"}, "cursor", "", api.CodeHarnessNotFound, []string{`unknown harness "cursor"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.boxes.image = tc.image
			e.svc.cfg.Provided = tc.provided
			se, err := e.svc.Create(ctx, api.SessionsPost{Sandbox: "box", Harness: tc.harness})
			if tc.code == "" {
				if err != nil || se.Harness != tc.want {
					t.Fatalf("Create = %q, %v; want harness %q", se.Harness, err, tc.want)
				}
				if got, err := e.svc.Get(ctx, se.ID); err != nil || got.Harness != tc.want {
					t.Errorf("the stored session has harness %q, %v", got.Harness, err)
				}
				return
			}
			if apiCode(err) != tc.code {
				t.Fatalf("Create = %+v, %v; want %s", se, err, tc.code)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
		})
	}
}

func TestDeleteSandboxDeletesItsSessions(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	e.turn(id, "hi")
	harnessLog := filepath.Join(e.logDir, "box.log")

	// An earlier sandbox of the same name: this one's sessions and harness log stay.
	e.svc.SandboxDeleted("box", "id-earlier")
	if _, err := e.svc.Get(context.Background(), id); err != nil {
		t.Fatalf("session after another sandbox named box was deleted: %v", err)
	}
	if _, err := os.Stat(harnessLog); err != nil {
		t.Fatalf("harness log after another sandbox named box was deleted: %v", err)
	}

	e.boxes.delete()
	e.svc.SandboxStopped("box")
	e.svc.SandboxDeleted("box", "id-box")
	expectGone(t, e, id)
}

// Until the cascade has run, a session of a deleted sandbox does not run in one made since under
// the same name.
func TestSessionOfADeletedSandboxDoesNotRunInItsNamesake(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	e.boxes.mu.Lock()
	e.boxes.id = "id-namesake"
	e.boxes.mu.Unlock()
	seq := e.prompt(id, "hi")
	evs := e.until(id, seq, isTurnEnd)
	expect(t, evs, "error", "turn_end:error")
	if msg := data[api.ErrorData](t, evs[0]).Message; !strings.Contains(msg, "was deleted") {
		t.Fatalf("error = %q", msg)
	}
	if e.boxes.execs != 0 {
		t.Fatalf("the harness started in the namesake")
	}
}

// A cascade that fails leaves the sandbox deleted; the next start deletes what it left.
func TestFailedSandboxCascadeIsFinishedAtNextStart(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	e.turn(id, "hi")
	e.boxes.delete()
	e.svc.SandboxStopped("box")
	e.log.Close() // the events cannot be deleted, so neither is the session
	if err := os.WriteFile(filepath.Join(e.logDir, "old.log.1"), []byte("a sandbox deleted before\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.svc.SandboxDeleted("box", "id-box")
	if _, err := e.st.GetSession(id); err != nil {
		t.Fatalf("the session went though its events could not: %v", err)
	}

	e.close()
	e.open()
	expectGone(t, e, id)
	if _, err := os.Stat(filepath.Join(e.logDir, "old.log.1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("harness log of a deleted sandbox after a restart: %v", err)
	}
}

// expectGone checks that a session of a deleted sandbox is gone with its events and harness log.
func expectGone(t *testing.T, e *testEnv, id string) {
	t.Helper()
	if _, err := e.svc.Get(context.Background(), id); apiCode(err) != api.CodeSessionNotFound {
		t.Fatalf("session after its sandbox was deleted: %v", err)
	}
	if seq, _ := e.log.LastSeq(id); seq != 0 {
		t.Fatalf("events left: last seq %d", seq)
	}
	if _, err := os.Stat(filepath.Join(e.logDir, "box.log")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("harness log after its sandbox was deleted: %v", err)
	}
}

func TestCancelWhileTheSandboxStarts(t *testing.T) {
	e := newEnv(t)
	e.boxes.running = false
	e.boxes.startGate = make(chan struct{})
	id := e.create("")
	seq := e.prompt(id, "hello")
	waitState(t, e.svc, id, api.SessionRunning)
	if _, err := e.svc.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	close(e.boxes.startGate) // the start finishes; the turn ends cancelled, not failed
	expect(t, e.until(id, seq, isTurnEnd), "turn_end:cancelled")
	if e.boxes.execs != 0 {
		t.Fatalf("a cancelled turn started the harness")
	}
}

func TestPromptRightAfterTurnEnd(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	sub, err := e.svc.Subscribe(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// A client that saw turn_end may prompt at once: never turn_in_progress.
	for i := range 50 {
		if _, err := e.svc.Prompt(context.Background(), id, fmt.Sprintf("turn %d", i)); err != nil {
			t.Fatalf("prompt %d: %v", i, err)
		}
		for ev := range sub.C() {
			if ev.Type == api.EventTurnEnd {
				break
			}
		}
	}
}

func TestSubscribePastTheEnd(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	e.turn(id, "hi")
	if _, err := e.svc.Subscribe(id, 4); apiCode(err) != api.CodeInvalidArgument {
		t.Fatalf("subscribe after=4 with 3 events: %v, want invalid_argument", err)
	}
	sub, err := e.svc.Subscribe(id, 3)
	if err != nil {
		t.Fatalf("subscribe at the end: %v", err)
	}
	sub.Close()
}

// A turn's stop reason is ACP's as the harness sent it: pkg/api names the same values.
func TestStopReasonsAreACPs(t *testing.T) {
	for acp, ours := range map[acpsdk.StopReason]api.StopReason{
		acpsdk.StopReasonEndTurn:         api.StopReasonEndTurn,
		acpsdk.StopReasonMaxTokens:       api.StopReasonMaxTokens,
		acpsdk.StopReasonMaxTurnRequests: api.StopReasonMaxTurnRequests,
		acpsdk.StopReasonRefusal:         api.StopReasonRefusal,
		acpsdk.StopReasonCancelled:       api.StopReasonCancelled,
	} {
		if string(acp) != string(ours) {
			t.Errorf("ACP's stop reason %q is %q in pkg/api", acp, ours)
		}
	}
}

// A create or prompt whose record or event was stored and whose receipt a crash lost is
// retried with its key (the same store.Call) after the restart: it gets the session and the
// seq its call made, and nothing is stored twice; another call makes its own.
func TestRetryOfACallFindsItsSessionAndPrompt(t *testing.T) {
	e := newEnv(t)
	call := func(c string) context.Context { return store.WithCall(context.Background(), store.Call(c)) }
	p := api.SessionsPost{Sandbox: "box", Harness: "fake", Cwd: e.boxes.dir}
	se, err := e.svc.Create(call("create"), p)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := e.svc.Prompt(call("prompt"), se.ID, "once")
	if err != nil {
		t.Fatal(err)
	}
	e.until(se.ID, acc.Seq-1, isTurnEnd)
	e.close()
	e.open()

	again, err := e.svc.Create(call("create"), p)
	if err != nil || again.ID != se.ID {
		t.Fatalf("create retried with its call: %s, %v; want session %s", again.ID, err, se.ID)
	}
	if list, err := e.svc.List(context.Background(), "box"); err != nil || len(list) != 1 {
		t.Fatalf("%d sessions (%v) after a retried create, want 1", len(list), err)
	}
	accAgain, err := e.svc.Prompt(call("prompt"), se.ID, "once")
	if err != nil || accAgain.Seq != acc.Seq {
		t.Fatalf("prompt retried with its call: seq %d, %v; want seq %d", accAgain.Seq, err, acc.Seq)
	}
	evs, err := e.svc.Events(se.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, evs, "prompt", "update:agent_message_chunk:echo: once", "turn_end:end_turn")

	other, err := e.svc.Create(call("other"), p)
	if err != nil || other.ID == se.ID {
		t.Fatalf("another create: %s, %v; want a new session", other.ID, err)
	}
	if next, err := e.svc.Prompt(call("other"), se.ID, "once"); err != nil || next.Seq <= acc.Seq {
		t.Fatalf("another prompt: seq %d, %v; want one after %d", next.Seq, err, acc.Seq)
	}
}

// A stop that begins after a prompt was accepted and before its turn started the sandbox wins:
// the turn ends with an error instead of starting the sandbox again once the stop has answered.
// A prompt accepted after the stop wakes the sandbox.
func TestStopWinsOverATurnNotStartedYet(t *testing.T) {
	e := newEnv(t)
	// Its own policy: the prompt asks nothing of the sandbox before its turn does.
	id := e.create(api.PolicyAutoApprove)
	gate := make(chan struct{})
	e.boxes.mu.Lock()
	e.boxes.getGate = gate
	e.boxes.mu.Unlock()
	seq := e.prompt(id, "too late")
	// What the sandbox manager does for a stop: tell the service as it begins, then stop.
	e.svc.SandboxStopped("box")
	e.boxes.stop()
	e.boxes.mu.Lock()
	e.boxes.getGate = nil
	e.boxes.mu.Unlock()
	close(gate)
	expect(t, e.until(id, seq-1, isTurnEnd), "prompt", "error", "turn_end:error")
	e.boxes.mu.Lock()
	starts, running := e.boxes.starts, e.boxes.running
	e.boxes.mu.Unlock()
	if starts != 0 || running {
		t.Fatalf("the turn started the stopped sandbox (%d starts, running %v)", starts, running)
	}
	expect(t, e.turn(id, "wake up"), "prompt", "update:agent_message_chunk:echo: wake up", "turn_end:end_turn")
	if e.boxes.starts != 1 {
		t.Errorf("a prompt after the stop started the sandbox %d times, want 1", e.boxes.starts)
	}
}

// newEnvLimited is newEnv with a log held to lim.
func newEnvLimited(t *testing.T, lim eventlog.Limits) *testEnv {
	e := newEnv(t)
	e.close()
	e.limits = lim
	e.open()
	return e
}

// A harness that floods its session past the log's limit has its turn stopped with a notice
// that says so; the next prompt is session_log_full until the session is deleted (for the
// session's own limit) or the sandbox's other sessions are (for the sandbox's).
func TestFullLogEndsTheTurnAndRefusesPrompts(t *testing.T) {
	flood := "repeat 100000 message chunk {i}\n"
	fullTurn := func(t *testing.T, e *testEnv, id string, want string) {
		t.Helper()
		evs := e.turn(id, e.script("flood.fake", flood))
		n := len(evs)
		expect(t, evs[n-2:], "notice", "turn_end:cancelled")
		if msg := data[api.NoticeData](t, evs[n-2]).Message; !strings.Contains(msg, want) || !strings.Contains(msg, "this turn was stopped") {
			t.Fatalf("notice = %q, want it to say %q", msg, want)
		}
		_, err := e.svc.Prompt(context.Background(), id, "more")
		if apiCode(err) != api.CodeSessionLogFull || !strings.Contains(err.Error(), want) {
			t.Fatalf("prompt to a full session: %v, want %s saying %q", err, api.CodeSessionLogFull, want)
		}
	}
	t.Run("session", func(t *testing.T) {
		e := newEnvLimited(t, eventlog.Limits{SessionEvents: 200})
		id := e.create("")
		fullTurn(t, e, id, "hiloop session delete "+id)
		if u := e.log.Usage(id); u.Events > 200+3 {
			t.Errorf("the session stored %d events, over its limit of 200 and the turn's end", u.Events)
		}
		// Another session of the sandbox has room of its own.
		expect(t, e.turn(e.create(""), "hello"), "prompt", "update:agent_message_chunk:echo: hello", "turn_end:end_turn")
	})
	t.Run("sandbox", func(t *testing.T) {
		e := newEnvLimited(t, eventlog.Limits{SandboxEvents: 200})
		first := e.create("")
		e.turn(first, e.script("some.fake", "repeat 50 message chunk {i}\n"))
		second := e.create("")
		fullTurn(t, e, second, "sandbox box")
		if err := e.svc.Delete(context.Background(), first); err != nil {
			t.Fatal(err)
		}
		expect(t, e.turn(second, "hello"), "prompt", "update:agent_message_chunk:echo: hello", "turn_end:end_turn")
	})
}
