package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

func TestEchoAndPersistedHistory(t *testing.T) {
	state, cwd := t.TempDir(), t.TempDir()
	p := startAgent(t, state, &testClient{})
	init := p.initialize(t)
	if !init.AgentCapabilities.LoadSession || init.AgentCapabilities.SessionCapabilities.Resume == nil {
		t.Errorf("capabilities %+v: want load and resume by default", init.AgentCapabilities)
	}
	if len(init.AuthMethods) != 0 {
		t.Errorf("auth methods %v, want none", init.AuthMethods)
	}
	id := p.newSession(t, cwd)
	reason, err := p.prompt(t, id, "  hello there \n")
	if err != nil || reason != acp.StopReasonEndTurn {
		t.Fatalf("prompt: %q, %v; want end_turn", reason, err)
	}
	if got, want := p.client.seen(), []string{"message:echo: hello there"}; !slices.Equal(got, want) {
		t.Errorf("updates %q, want %q", got, want)
	}

	data, err := os.ReadFile(filepath.Join(state, "sessions", string(id)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	want := record{ID: string(id), Cwd: cwd, Turns: []turnRecord{{Prompt: "hello there", Replies: []string{"echo: hello there"}}}}
	if fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Errorf("persisted %+v, want %+v", rec, want)
	}
}

func TestScriptUpdatesArriveInOrder(t *testing.T) {
	cwd := t.TempDir()
	writeFile(t, filepath.Join(cwd, "scripts", "work.fake"), `
# comments and blank lines are skipped

thought  let me look   # not a comment
plan read the file | edit it |
tool c1 read Read main.go
tool_update c1 in_progress
tool_update c1 completed 42 lines
diff c1 main.go x := 1 | x := 2\nreturn x
diff c1 new.go | package a
tool c2 execute Run tests
tool_update c2 failed
message done
`)
	p := startAgent(t, t.TempDir(), &testClient{})
	p.initialize(t)
	id := p.newSession(t, cwd)
	reason, err := p.prompt(t, id, "run scripts/work.fake") // relative to the session's cwd
	if err != nil || reason != acp.StopReasonEndTurn {
		t.Fatalf("prompt: %q, %v", reason, err)
	}
	want := []string{
		"thought:let me look   # not a comment",
		"plan:read the file(pending)|edit it(pending)",
		"tool:c1:read:pending:Read main.go",
		"tool_update:c1:in_progress",
		"tool_update:c1:completed:42 lines",
		`tool_update:c1:diff main.go "x := 1" -> "x := 2\nreturn x"`,
		`tool_update:c1:diff new.go "<new file>" -> "package a"`,
		"tool:c2:execute:pending:Run tests",
		"tool_update:c2:failed",
		"message:done",
	}
	if got := p.client.seen(); !slices.Equal(got, want) {
		t.Errorf("updates:\n%q\nwant:\n%q", got, want)
	}

	p.client.reset()
	p.run(t, id, "text.fake", acp.StopReasonEndTurn)
	want = []string{"thought:the user wants a greeting", "plan:say hello(pending)|say goodbye(pending)", "message:hello", "message:goodbye"}
	if got := p.client.seen(); !slices.Equal(got, want) {
		t.Errorf("text.fake updates %q, want %q", got, want)
	}
}

func TestPermissionIsAnsweredByKind(t *testing.T) {
	before := []string{"message:I will edit README.md", "tool:call-1:edit:pending:Edit README.md"}
	allowed := append(slices.Clone(before), "tool_update:call-1:in_progress", "tool_update:call-1:completed:wrote 3 lines", "message:done")
	cancelled := acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
		Cancelled: &acp.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}}
	for _, tc := range []struct {
		name   string
		answer func(context.Context, acp.RequestPermissionRequest) acp.RequestPermissionResponse
		reason acp.StopReason
		want   []string
	}{
		{"allow once", choose(acp.PermissionOptionKindAllowOnce), acp.StopReasonEndTurn, allowed},
		{"allow always", choose(acp.PermissionOptionKindAllowAlways), acp.StopReasonEndTurn, allowed},
		{"reject once", choose(acp.PermissionOptionKindRejectOnce), acp.StopReasonEndTurn, append(slices.Clone(before),
			"message:permission denied for call-1", "tool_update:call-1:failed", "message:done")},
		{"cancelled", func(context.Context, acp.RequestPermissionRequest) acp.RequestPermissionResponse { return cancelled },
			acp.StopReasonCancelled, before},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &testClient{answer: tc.answer}
			p := startAgent(t, t.TempDir(), c)
			p.initialize(t)
			id := p.newSession(t, t.TempDir())
			p.run(t, id, "tool.fake", tc.reason)
			if got := c.seen(); !slices.Equal(got, tc.want) {
				t.Errorf("updates:\n%q\nwant:\n%q", got, tc.want)
			}
			if len(c.permissions) != 1 {
				t.Fatalf("%d permission requests, want 1", len(c.permissions))
			}
			req := c.permissions[0]
			if req.SessionId != id || req.ToolCall.ToolCallId != "call-1" || *req.ToolCall.Title != "Edit README.md" || *req.ToolCall.Kind != acp.ToolKindEdit {
				t.Errorf("permission request %+v does not describe tool call call-1", req)
			}
			for _, o := range req.Options {
				if string(o.OptionId) == string(o.Kind) {
					t.Errorf("option id %q equals its kind; clients could get away with choosing by id", o.OptionId)
				}
			}
		})
	}
}

// TestCancelInterruptsTheTurn cancels once the script's first message has arrived, whatever the
// turn then waits for.
func TestCancelInterruptsTheTurn(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		permission   bool
	}{
		{"sleep", "message working\nsleep 1h\nmessage never\n", false},
		{"permission", "message working\ntool t1 execute rm -rf /\npermission t1\nmessage never\n", true},
		{"repeat", "message working\nrepeat 100000000 thought {i}\nmessage never\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cwd := t.TempDir()
			writeFile(t, filepath.Join(cwd, "s.fake"), tc.script)
			started := make(chan struct{})
			var once sync.Once
			c := &testClient{onUpdate: func(n acp.SessionNotification) {
				if describe(n.Update) == "message:working" && !tc.permission {
					once.Do(func() { close(started) })
				}
			}}
			// The client answers a pending permission request "cancelled" once the agent gives
			// up on it, as ACP asks of a client that sent session/cancel.
			c.answer = func(ctx context.Context, _ acp.RequestPermissionRequest) acp.RequestPermissionResponse {
				once.Do(func() { close(started) })
				<-ctx.Done()
				return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
					Cancelled: &acp.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}}
			}
			p := startAgent(t, t.TempDir(), c)
			p.initialize(t)
			id := p.newSession(t, cwd)

			done := make(chan error, 1)
			var reason acp.StopReason
			go func() {
				var err error
				reason, err = p.prompt(t, id, "run s.fake")
				done <- err
			}()
			<-started
			start := time.Now()
			if err := p.conn.Cancel(testContext(t), acp.CancelNotification{SessionId: id}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil || reason != acp.StopReasonCancelled {
					t.Fatalf("prompt: %q, %v; want cancelled", reason, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the turn did not end after session/cancel")
			}
			t.Logf("cancelled in %v", time.Since(start))
			if slices.Contains(c.seen(), "message:never") {
				t.Error("the script went on after the cancel")
			}
			// The session takes the next prompt.
			if reason, err := p.prompt(t, id, "again"); err != nil || reason != acp.StopReasonEndTurn {
				t.Errorf("next prompt: %q, %v", reason, err)
			}
		})
	}
}

func TestRepeatSendsEveryUpdateInOrder(t *testing.T) {
	p := startAgent(t, t.TempDir(), &testClient{})
	p.initialize(t)
	id := p.newSession(t, t.TempDir())
	p.run(t, id, "chatty.fake", acp.StopReasonEndTurn)
	got := p.client.seen()
	if len(got) != 10001 {
		t.Fatalf("%d updates, want 10001", len(got))
	}
	for i := range 10000 {
		if want := fmt.Sprintf("message:chunk %d", i+1); got[i] != want {
			t.Fatalf("update %d is %q, want %q", i, got[i], want)
		}
	}
	if got[10000] != "message:end" {
		t.Errorf("last update %q, want message:end", got[10000])
	}
}

func TestLoadReplaysHistoryInANewAgent(t *testing.T) {
	state, cwd := t.TempDir(), t.TempDir()
	first := startAgent(t, state, &testClient{answer: choose(acp.PermissionOptionKindRejectOnce)})
	first.initialize(t)
	id := first.newSession(t, cwd)
	if _, err := first.prompt(t, id, "one"); err != nil {
		t.Fatal(err)
	}
	first.run(t, id, "tool.fake", acp.StopReasonEndTurn)
	first.stop(t)

	c := &testClient{}
	second := startAgent(t, state, c)
	second.initialize(t)
	_, err := second.prompt(t, id, "before load")
	if re := requestError(t, err); re.Code != -32002 {
		t.Errorf("prompt on a session this process does not know: %v, want code -32002", re)
	}
	if _, err := second.conn.LoadSession(testContext(t), acp.LoadSessionRequest{SessionId: id, Cwd: cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("session/load: %v", err)
	}
	toolPrompt := "run " + mustAbs(t, "testdata/tool.fake")
	want := []string{
		"user:one", "message:echo: one",
		"user:" + toolPrompt, "message:I will edit README.md", "message:permission denied for call-1", "message:done",
	}
	if got := c.seen(); !slices.Equal(got, want) {
		t.Errorf("replay:\n%q\nwant:\n%q", got, want)
	}
	c.reset()
	if reason, err := second.prompt(t, id, "two"); err != nil || reason != acp.StopReasonEndTurn {
		t.Fatalf("prompt after load: %q, %v", reason, err)
	}

	_, err = second.conn.LoadSession(testContext(t), acp.LoadSessionRequest{SessionId: "fake-nope", Cwd: cwd, McpServers: []acp.McpServer{}})
	if re := requestError(t, err); re.Code != -32002 {
		t.Errorf("loading an unknown session: %v, want code -32002", re)
	}
	_, err = second.conn.LoadSession(testContext(t), acp.LoadSessionRequest{SessionId: "../config", Cwd: cwd, McpServers: []acp.McpServer{}})
	if re := requestError(t, err); re.Code != -32002 {
		t.Errorf("loading a path: %v, want code -32002", re)
	}
}

func TestResumeDoesNotReplay(t *testing.T) {
	state, cwd := t.TempDir(), t.TempDir()
	first := startAgent(t, state, &testClient{})
	first.initialize(t)
	id := first.newSession(t, cwd)
	if _, err := first.prompt(t, id, "one"); err != nil {
		t.Fatal(err)
	}
	first.stop(t)

	c := &testClient{}
	second := startAgent(t, state, c)
	second.initialize(t)
	if _, err := second.conn.ResumeSession(testContext(t), acp.ResumeSessionRequest{SessionId: id, Cwd: cwd}); err != nil {
		t.Fatalf("session/resume: %v", err)
	}
	if got := c.seen(); len(got) != 0 {
		t.Errorf("resume sent updates %q, want none", got)
	}
	if reason, err := second.prompt(t, id, "two"); err != nil || reason != acp.StopReasonEndTurn {
		t.Fatalf("prompt after resume: %q, %v", reason, err)
	}
	_, err := second.conn.ResumeSession(testContext(t), acp.ResumeSessionRequest{SessionId: "fake-nope", Cwd: cwd})
	if re := requestError(t, err); re.Code != -32002 {
		t.Errorf("resuming an unknown session: %v, want code -32002", re)
	}

	// The history kept both turns.
	rec, ok, err := store{dir: state}.load(string(id))
	if err != nil || !ok || len(rec.Turns) != 2 || rec.Turns[1].Prompt != "two" {
		t.Errorf("history after resume: %+v, %v, %v", rec, ok, err)
	}
}

func TestConfigDisablesLoadAndResume(t *testing.T) {
	for _, cfg := range []string{`{"load": false, "resume": false}`, `{"load": false}`, `{"resume": false}`, `{}`} {
		t.Run(cfg, func(t *testing.T) {
			state := t.TempDir()
			writeFile(t, filepath.Join(state, ConfigFile), cfg)
			want := Config{Load: true, Resume: true}
			if err := json.Unmarshal([]byte(cfg), &want); err != nil {
				t.Fatal(err)
			}
			p := startAgent(t, state, &testClient{})
			caps := p.initialize(t).AgentCapabilities
			if caps.LoadSession != want.Load || (caps.SessionCapabilities.Resume != nil) != want.Resume {
				t.Errorf("capabilities load=%v resume=%v, want %+v", caps.LoadSession, caps.SessionCapabilities.Resume != nil, want)
			}
			cwd := t.TempDir()
			id := p.newSession(t, cwd)
			_, err := p.conn.LoadSession(testContext(t), acp.LoadSessionRequest{SessionId: id, Cwd: cwd, McpServers: []acp.McpServer{}})
			checkEnabled(t, "session/load", err, want.Load)
			_, err = p.conn.ResumeSession(testContext(t), acp.ResumeSessionRequest{SessionId: id, Cwd: cwd})
			checkEnabled(t, "session/resume", err, want.Resume)
		})
	}
}

func checkEnabled(t *testing.T, method string, err error, enabled bool) {
	t.Helper()
	if enabled {
		if err != nil {
			t.Errorf("%s: %v, want it served", method, err)
		}
		return
	}
	if re := requestError(t, err); re.Code != -32601 {
		t.Errorf("%s: %v, want method not found (-32601)", method, re)
	}
}

func TestBadConfigStopsTheAgent(t *testing.T) {
	state := t.TempDir()
	writeFile(t, filepath.Join(state, ConfigFile), `{"load": "yes"}`)
	err := Run(context.Background(), state, strings.NewReader(""), &syncBuffer{}, &syncBuffer{})
	if err == nil || !strings.Contains(err.Error(), ConfigFile) {
		t.Errorf("Run with a bad config.json: %v, want an error naming it", err)
	}
}

func TestFailReturnsTheError(t *testing.T) {
	p := startAgent(t, t.TempDir(), &testClient{})
	p.initialize(t)
	id := p.newSession(t, t.TempDir())
	_, err := p.prompt(t, id, "run "+mustAbs(t, "testdata/fail.fake"))
	if re := requestError(t, err); re.Message != "the model is overloaded" {
		t.Errorf("error message %q, want the script's text", re.Message)
	}
	if got := p.client.seen(); !slices.Equal(got, []string{"message:trying"}) {
		t.Errorf("updates %q", got)
	}
}

func TestGarbageIsARawLineAndExtIsIgnored(t *testing.T) {
	p := startAgent(t, t.TempDir(), &testClient{})
	p.initialize(t)
	id := p.newSession(t, t.TempDir())
	p.run(t, id, "garbage.fake", acp.StopReasonEndTurn)
	if got, want := p.client.seen(), []string{"message:before", "message:after"}; !slices.Equal(got, want) {
		t.Errorf("updates %q, want %q", got, want)
	}
	out := p.stdout.String()
	lines := strings.Split(out, "\n")
	if !slices.Contains(lines, "this is not JSON-RPC") {
		t.Errorf("stdout has no raw garbage line:\n%s", out)
	}
	if !strings.Contains(out, `"method":"`+ExtMethod+`"`) {
		t.Errorf("stdout has no %s notification:\n%s", ExtMethod, out)
	}
	for _, l := range lines {
		if l != "" && l != "this is not JSON-RPC" && !json.Valid([]byte(l)) {
			t.Errorf("stdout line is neither JSON nor the garbage line: %q", l)
		}
	}
}

func TestUnknownDirectiveNamesFileAndLine(t *testing.T) {
	cwd := t.TempDir()
	writeFile(t, filepath.Join(cwd, "bad.fake"), "message fine\n\nfrobnicate now\n")
	p := startAgent(t, t.TempDir(), &testClient{})
	p.initialize(t)
	id := p.newSession(t, cwd)
	_, err := p.prompt(t, id, "run bad.fake")
	re := requestError(t, err)
	if !strings.Contains(re.Message, "bad.fake:3") || !strings.Contains(re.Message, `"frobnicate"`) {
		t.Errorf("error %q does not name bad.fake:3 and the directive", re.Message)
	}
	if got := p.client.seen(); len(got) != 0 {
		t.Errorf("a script that does not parse sent %q", got)
	}
	_, err = p.prompt(t, id, "run missing.fake")
	if re := requestError(t, err); !strings.Contains(re.Message, "missing.fake") {
		t.Errorf("error %q does not name the missing script", re.Message)
	}
}

func TestPromptOnUnknownSession(t *testing.T) {
	p := startAgent(t, t.TempDir(), &testClient{})
	p.initialize(t)
	_, err := p.prompt(t, "fake-nope", "hi")
	if re := requestError(t, err); re.Code != -32002 {
		t.Errorf("prompt on an unknown session: %v, want -32002", re)
	}
}

func TestCrashInProcess(t *testing.T) {
	cwd := t.TempDir()
	writeFile(t, filepath.Join(cwd, "c.fake"), "message bye\nstderr going down\ncrash 7\nmessage never\n")
	p := startAgent(t, t.TempDir(), &testClient{})
	p.initialize(t)
	id := p.newSession(t, cwd)
	ctx := testContext(t)
	go p.conn.Prompt(ctx, acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("run c.fake")}}) // never answered
	var crash *CrashError
	if err := p.wait(t); !errors.As(err, &crash) || crash.Code != 7 {
		t.Fatalf("Run returned %v, want a crash with code 7", err)
	}
	if !strings.Contains(p.stderr.String(), "going down\n") {
		t.Errorf("stderr lacks the stderr directive's line:\n%s", p.stderr.String())
	}
	if strings.Contains(p.stdout.String(), "never") {
		t.Error("the agent wrote after crashing")
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
