package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// fakeSessions is a daemon with one session, "s1", whose turns follow a script, in one
// sandbox, "web".
type fakeSessions struct {
	mu        sync.Mutex
	session   api.Session
	box       api.Sandbox // its Name "": deleted
	events    []api.SessionEvent
	wake      chan struct{}
	cancelled chan struct{} // closed by POST cancel during a turn
	cancels   int
	decided   map[string]string // tool call id → kind

	// turn plays a turn after its prompt is stored; it returns when the turn has ended.
	turn func(f *fakeSessions)
}

func newFakeSessions(t *testing.T, turn func(*fakeSessions)) (*fakeSessions, *Factory, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	d := &fakeSessions{
		session: api.Session{ID: "s1", Sandbox: "web", Harness: "fake", Cwd: "/workspace",
			PermissionPolicy: api.PolicyAsk, State: api.SessionIdle, CreatedAt: time.Now().Add(-time.Hour)},
		box:     api.Sandbox{Name: "web", ID: "sb-web", State: api.StateRunning},
		wake:    make(chan struct{}),
		decided: map[string]string{},
		turn:    turn,
	}
	srv := httptest.NewServer(d.handler())
	t.Cleanup(srv.Close)
	out, errOut := &bytes.Buffer{}, &bytes.Buffer{}
	f := &Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}, Host: srv.URL}
	return d, f, out, errOut
}

func (d *fakeSessions) add(typ api.EventType, data any) uint64 {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	seq := uint64(len(d.events) + 1)
	d.events = append(d.events, api.SessionEvent{Seq: seq, Type: typ, Time: time.Unix(1.8e9, 0).UTC(), Data: b})
	d.session.LastSeq = seq
	if typ == api.EventTurnEnd {
		d.session.State = api.SessionIdle
	}
	close(d.wake)
	d.wake = make(chan struct{})
	return seq
}

func (d *fakeSessions) update(u map[string]any) { d.add(api.EventUpdate, u) }

// setBox changes the sandbox as the daemon reports it.
func (d *fakeSessions) setBox(f func(*api.Sandbox)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(&d.box)
}

func chunk(kind, text string) map[string]any {
	return map[string]any{"sessionUpdate": kind, "content": map[string]any{"type": "text", "text": text}}
}

func turnEnd(reason api.StopReason) api.TurnEndData { return api.TurnEndData{StopReason: reason} }

// reply answers as the daemon does: v as JSON with status.
func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// fail answers with the daemon's error body for code.
func fail(w http.ResponseWriter, code api.ErrorCode, msg string) {
	reply(w, code.HTTPStatus(), api.ErrorBody{Error: &api.Error{Code: code, Message: msg}})
}

func (d *fakeSessions) handler() http.Handler {
	mux := http.NewServeMux()
	// known answers for the session's id, else session_not_found
	known := func(w http.ResponseWriter, r *http.Request) bool {
		if r.PathValue("id") != "s1" {
			fail(w, api.CodeSessionNotFound, fmt.Sprintf("session %q not found", r.PathValue("id")))
			return false
		}
		return true
	}
	mux.HandleFunc("GET /v1/sandboxes/{name}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if r.PathValue("name") != d.box.Name {
			fail(w, api.CodeSandboxNotFound, fmt.Sprintf("sandbox %q not found", r.PathValue("name")))
			return
		}
		reply(w, http.StatusOK, d.box)
	})
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		var p api.SessionsPost
		json.NewDecoder(r.Body).Decode(&p)
		if p.Harness != "" && p.Harness != "fake" {
			fail(w, api.CodeHarnessNotFound, fmt.Sprintf("unknown harness %q", p.Harness))
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		s := d.session
		s.Sandbox, s.Cwd = p.Sandbox, p.Cwd
		if p.PermissionPolicy != "" {
			s.PermissionPolicy = p.PermissionPolicy
		}
		reply(w, http.StatusCreated, s)
	})
	mux.HandleFunc("GET /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		l := api.SessionList{Sessions: []api.Session{}}
		if sb := r.URL.Query().Get("sandbox"); sb == "" || sb == d.session.Sandbox {
			l.Sessions = append(l.Sessions, d.session)
		}
		reply(w, http.StatusOK, l)
	})
	mux.HandleFunc("GET /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if known(w, r) {
			d.mu.Lock()
			defer d.mu.Unlock()
			reply(w, http.StatusOK, d.session)
		}
	})
	mux.HandleFunc("DELETE /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !known(w, r) {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.session.State != api.SessionIdle {
			fail(w, api.CodeTurnInProgress, "a turn is running")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/sessions/{id}/prompt", func(w http.ResponseWriter, r *http.Request) {
		if !known(w, r) {
			return
		}
		var p api.PromptPost
		json.NewDecoder(r.Body).Decode(&p)
		d.mu.Lock()
		if d.session.State != api.SessionIdle {
			d.mu.Unlock()
			fail(w, api.CodeTurnInProgress, "a turn is running")
			return
		}
		d.session.State = api.SessionRunning
		d.cancelled = make(chan struct{})
		d.mu.Unlock()
		seq := d.add(api.EventPrompt, api.PromptPost{Text: p.Text})
		go d.turn(d)
		reply(w, http.StatusAccepted, api.PromptAccepted{Seq: seq})
	})
	mux.HandleFunc("POST /v1/sessions/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		if !known(w, r) {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		d.cancels++
		if d.session.State != api.SessionIdle && d.cancels == 1 {
			close(d.cancelled)
		}
		reply(w, http.StatusOK, d.session)
	})
	mux.HandleFunc("POST /v1/sessions/{id}/permissions/{tc}", func(w http.ResponseWriter, r *http.Request) {
		if !known(w, r) {
			return
		}
		var a api.PermissionAnswer
		json.NewDecoder(r.Body).Decode(&a)
		d.mu.Lock()
		defer d.mu.Unlock()
		tc := r.PathValue("tc")
		if tc != "tc1" {
			fail(w, api.CodePermissionNotFound, "no permission request "+tc)
			return
		}
		if k, ok := d.decided[tc]; ok && k != a.Kind {
			fail(w, api.CodePermissionDecided, "answered "+k+" already")
			return
		}
		d.decided[tc] = a.Kind
		reply(w, http.StatusOK, api.PermissionDecision{ToolCallID: tc, Outcome: api.OutcomeSelected, OptionID: "o-" + a.Kind, Kind: a.Kind, By: api.ResolvedByOperator, Operator: a.Operator})
	})
	mux.HandleFunc("GET /v1/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		if !known(w, r) {
			return
		}
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
		if err != nil {
			limit = api.MaxEventsPage
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		l := api.SessionEventList{Events: []api.SessionEvent{}}
		if after < uint64(len(d.events)) {
			l.Events = d.events[after:min(uint64(len(d.events)), after+uint64(limit))]
		}
		reply(w, http.StatusOK, l)
	})
	mux.HandleFunc("GET /v1/sessions/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		if !known(w, r) {
			return
		}
		next, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		ctx := conn.CloseRead(r.Context())
		for {
			d.mu.Lock()
			evs := d.events[min(next, uint64(len(d.events))):]
			wake := d.wake
			d.mu.Unlock()
			for _, ev := range evs {
				b, _ := json.Marshal(ev)
				if conn.Write(ctx, websocket.MessageText, b) != nil {
					return
				}
				next = ev.Seq
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
		}
	})
	return mux
}

// aTurn is a turn with text, a hidden thought, a tool call, a permission an operator approved,
// a plan and a notice.
func aTurn(stop api.StopReason) func(*fakeSessions) {
	return func(d *fakeSessions) {
		d.update(chunk("agent_thought_chunk", "pondering"))
		d.update(chunk("agent_message_chunk", "Hello"))
		d.update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "tc1", "title": "Read main.go", "kind": "read", "status": "pending"})
		d.add(api.EventPermission, api.PermissionData{ToolCallID: "tc1", Title: "Read main.go", ToolCall: json.RawMessage(`{}`), Policy: api.PolicyAsk,
			Options: []api.PermissionOption{{OptionID: "a", Kind: api.OptionAllowOnce, Name: "Allow"}, {OptionID: "b", Kind: api.OptionAllowAlways, Name: "Always"}, {OptionID: "c", Kind: api.OptionRejectOnce, Name: "Reject"}}})
		d.add(api.EventPermissionResolved, api.PermissionDecision{ToolCallID: "tc1", Outcome: api.OutcomeSelected, OptionID: "a", Kind: api.OptionAllowOnce, By: api.ResolvedByOperator})
		d.update(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "tc1", "status": "completed"})
		d.update(map[string]any{"sessionUpdate": "plan", "entries": []map[string]any{{"content": "read", "priority": "high", "status": "completed"}}})
		d.add(api.EventNotice, api.NoticeData{Message: "harness restarted"})
		d.update(chunk("agent_message_chunk", ", world"))
		d.add(api.EventTurnEnd, turnEnd(stop))
	}
}

func run(f *Factory, args ...string) int { return Run(f, args) }

func TestSessionPromptHuman(t *testing.T) {
	d, f, out, errOut := newFakeSessions(t, aTurn(api.StopReasonEndTurn))
	// An earlier turn, not to be shown.
	d.add(api.EventPrompt, api.PromptPost{Text: "old"})
	d.update(chunk("agent_message_chunk", "old answer\n"))
	d.add(api.EventTurnEnd, turnEnd(api.StopReasonEndTurn))

	if code := run(f, "session", "prompt", "s1", "say", "hello"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	// The text after the tool activity starts a line of its own: stdout is not the terminal
	// stderr writes on, so nothing else separates the two messages there.
	if out.String() != "Hello\n, world\n" {
		t.Errorf("stdout %q, want the agent's two messages on lines of their own and a final newline", out.String())
	}
	if d.events[3].Type != api.EventPrompt || !strings.Contains(string(d.events[3].Data), `"say hello"`) {
		t.Errorf("prompt stored as %s", d.events[3].Data)
	}
	for _, want := range []string{
		"▸ tool Read main.go (read) [tc1]\n",
		"? permission requested: Read main.go [tc1]\n",
		"  options: allow_once (Allow), allow_always (Always), reject_once (Reject)\n",
		"  approve: hiloop session approve s1 tc1 [--option allow_always]\n",
		"  deny:    hiloop session deny s1 tc1\n",
		"▸ Read main.go [tc1] approved by operator (allow_once)\n",
		"▸ tc1 completed\n",
		"▸ plan\n  [completed] read\n",
		"▸ notice: harness restarted\n",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut.String(), "pondering") || strings.Contains(errOut.String(), "old") {
		t.Errorf("stderr shows a thought or an earlier turn:\n%s", errOut)
	}
}

func TestSessionPromptThoughtsAndStopReason(t *testing.T) {
	_, f, out, errOut := newFakeSessions(t, aTurn(api.StopReasonMaxTokens))
	f.IO.In = strings.NewReader("from stdin\n")
	if code := run(f, "session", "prompt", "--thoughts", "s1", "-"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	if !strings.HasPrefix(errOut.String(), "pondering\n") {
		t.Errorf("the thought is not on a line of its own at the start of stderr:\n%s", errOut)
	}
	if !strings.HasSuffix(errOut.String(), "hiloop: the turn stopped: max_tokens\n") {
		t.Errorf("stderr does not end with the stop reason:\n%s", errOut)
	}
	if out.String() != "Hello\n, world\n" {
		t.Errorf("stdout %q", out.String())
	}
}

func TestSessionPromptJSON(t *testing.T) {
	d, f, out, errOut := newFakeSessions(t, aTurn(api.StopReasonEndTurn))
	d.add(api.EventPrompt, api.PromptPost{Text: "old"})
	d.add(api.EventTurnEnd, turnEnd(api.StopReasonEndTurn))
	if code := run(f, "session", "prompt", "-o", "json", "s1", "hi"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	var want bytes.Buffer
	for _, ev := range d.events[2:] {
		b, _ := json.Marshal(ev)
		want.Write(append(b, '\n'))
	}
	if out.String() != want.String() {
		t.Errorf("stdout:\n%s\nwant the turn's events from its prompt on:\n%s", out, &want)
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr: %s", errOut)
	}
}

func TestSessionPromptFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		output string
		want   string
	}{
		{"human", "table", "hiloop: error: the harness exited with status 1 (harness log: /var/log/h.log)\n"},
		{"json", "json", "hiloop: the harness exited with status 1 (harness log: /var/log/h.log)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, f, _, errOut := newFakeSessions(t, func(d *fakeSessions) {
				d.update(chunk("agent_message_chunk", "partial"))
				d.add(api.EventError, api.ErrorData{Message: "the harness exited with status 1", HarnessLog: "/var/log/h.log"})
				d.add(api.EventTurnEnd, turnEnd(api.StopReasonError))
			})
			if code := run(f, "session", "prompt", "-o", tc.output, "s1", "hi"); code != ExitError {
				t.Errorf("exit %d, want 1", code)
			}
			if !strings.HasSuffix(errOut.String(), tc.want) {
				t.Errorf("stderr:\n%s\nwant it to end with:\n%s", errOut, tc.want)
			}
		})
	}
}

func TestSessionPromptBusy(t *testing.T) {
	d, f, out, errOut := newFakeSessions(t, nil)
	d.session.State = api.SessionRunning
	if code := run(f, "session", "prompt", "s1", "hi"); code != ExitConflict {
		t.Errorf("exit %d, want %d", code, ExitConflict)
	}
	want := "hiloop: session s1 is busy with a turn: follow it with `hiloop session events s1 --follow`, or end it with `hiloop session cancel s1`\n"
	if errOut.String() != want || out.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}
	if code := run(f, "session", "delete", "s1"); code != ExitConflict {
		t.Errorf("delete during a turn: exit %d, want %d", code, ExitConflict)
	}
}

func TestSessionPromptCtrlC(t *testing.T) {
	t.Run("once cancels the turn", func(t *testing.T) {
		started := make(chan struct{})
		d, f, out, errOut := newFakeSessions(t, func(d *fakeSessions) {
			d.update(chunk("agent_message_chunk", "working"))
			close(started)
			<-d.cancelled
			d.add(api.EventTurnEnd, turnEnd(api.StopReasonCancelled))
		})
		sig := make(chan os.Signal, 2)
		go func() { <-started; time.Sleep(20 * time.Millisecond); sig <- os.Interrupt }()
		err := sessionPromptRun(context.Background(), f, &SessionPromptOptions{Session: "s1", Text: "hi", Output: "table", interrupts: sig})
		var em *exitMessage
		if !errors.As(err, &em) || em.msg != "turn cancelled" || exitCode(err) != ExitError {
			t.Errorf("sessionPromptRun = %v, want exit 1 with turn cancelled", err)
		}
		if d.cancels != 1 || out.String() != "working\n" {
			t.Errorf("%d cancels, stdout %q", d.cancels, out)
		}
		if !strings.Contains(errOut.String(), "hiloop: cancelling the turn; Ctrl-C again quits without waiting\n") {
			t.Errorf("stderr:\n%s", errOut)
		}
	})
	t.Run("twice quits", func(t *testing.T) {
		started := make(chan struct{})
		never := make(chan struct{})
		defer close(never)
		_, f, _, _ := newFakeSessions(t, func(d *fakeSessions) {
			d.update(chunk("agent_message_chunk", "working"))
			close(started)
			<-never // a harness that does not stop
		})
		sig := make(chan os.Signal, 2)
		go func() { <-started; sig <- os.Interrupt; sig <- os.Interrupt }()
		done := make(chan error, 1)
		go func() {
			done <- sessionPromptRun(context.Background(), f, &SessionPromptOptions{Session: "s1", Text: "hi", Output: "table", interrupts: sig})
		}()
		select {
		case err := <-done:
			if exitCode(err) != ExitInterrupted {
				t.Errorf("sessionPromptRun = %v (exit %d), want exit 130", err, exitCode(err))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a second Ctrl-C did not quit")
		}
	})
}

func TestSessionEvents(t *testing.T) {
	d, f, out, errOut := newFakeSessions(t, nil)
	d.add(api.EventPrompt, api.PromptPost{Text: "fix\nthe tests"})
	aTurn(api.StopReasonEndTurn)(d)
	d.add(api.EventError, api.ErrorData{Message: "boom", HarnessLog: "/l"})

	if code := run(f, "session", "events", "s1", "--after", "1"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `2      update              agent_thought_chunk "pondering"
3      update              agent_message_chunk "Hello"
4      update              tool_call Read main.go (read) [tc1] pending
5      permission          Read main.go [tc1] ask; options: allow_once (Allow), allow_always (Always), reject_once (Reject)
6      permission_resolved [tc1] selected allow_once by operator
7      update              tool_call_update [tc1] completed
8      update              plan: 1 entries
9      notice              harness restarted
10     update              agent_message_chunk ", world"
11     turn_end            end_turn
12     error               boom (harness log: /l)
`
	if out.String() != want {
		t.Errorf("events:\n%s\nwant:\n%s", out, want)
	}

	out.Reset()
	if code := run(f, "session", "events", "s1", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(d.events) {
		t.Fatalf("%d lines for %d events", len(lines), len(d.events))
	}
	for i, l := range lines {
		b, _ := json.Marshal(d.events[i])
		if l != string(b) {
			t.Errorf("line %d = %s, want %s", i, l, b)
		}
	}

	if code := run(f, "session", "events", "nope1"); code != ExitNotFound {
		t.Errorf("events of an unknown session: exit %d", code)
	}
	if code := run(f, "session", "events", "Bad/Id"); code != ExitNotFound {
		t.Errorf("events of a malformed id: exit %d", code)
	}
}

func TestSessionEventsFollow(t *testing.T) {
	d, f, _, _ := newFakeSessions(t, nil)
	out := &syncBuffer{}
	f.IO.Out = out
	d.add(api.EventPrompt, api.PromptPost{Text: "hi"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sessionEventsRun(ctx, f, &SessionEventsOptions{Session: "s1", Follow: true, Output: "json"})
	}()
	d.update(chunk("agent_message_chunk", "live"))
	d.add(api.EventTurnEnd, turnEnd(api.StopReasonEndTurn))
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), "\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel() // Ctrl-C
	if err := <-done; err != nil {
		t.Errorf("follow ended with %v, want nil at Ctrl-C", err)
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Errorf("%d events followed, want 3:\n%s", n, out)
	}
}

// syncBuffer is a buffer one goroutine writes while another reads.
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

func TestSessionCommands(t *testing.T) {
	d, f, out, errOut := newFakeSessions(t, nil)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
	}{
		{[]string{"session", "new", "web", "--policy", "ask"}, 0, "s1\n"},
		{[]string{"session", "new", "web", "--policy", "sometimes"}, ExitUsage, ""},
		{[]string{"session", "new", "web", "--cwd", "src"}, ExitUsage, ""},
		{[]string{"session", "new", "web", "--harness", "nope"}, ExitUsage, ""},
		{[]string{"session", "new"}, ExitUsage, ""},
		{[]string{"session", "get", "nope2"}, ExitNotFound, ""},
		{[]string{"session", "list", "db"}, 0, "ID  SANDBOX  HARNESS  POLICY  STATE  EVENTS  AGE\n"},
		{[]string{"session", "approve", "s1", "tc1", "--operator", "alice@laptop"}, 0, "tc1 approved by operator alice@laptop (allow_once)\n"},
		{[]string{"session", "approve", "s1", "tc1"}, 0, "tc1 approved by operator " + defaultOperator() + " (allow_once)\n"},
		{[]string{"session", "approve", "s1", "tc1", "--operator", "alice\tlaptop"}, ExitUsage, ""},
		{[]string{"session", "deny", "s1", "tc1"}, ExitConflict, ""},
		{[]string{"session", "deny", "s1", "tc2"}, ExitNotFound, ""},
		{[]string{"session", "approve", "s1", "tc1", "--option", "reject_once"}, ExitUsage, ""},
		{[]string{"session", "deny", "s1", "tc1", "--option", "allow_once"}, ExitUsage, ""},
		{[]string{"session", "cancel", "s1"}, 0, "s1 idle\n"},
		{[]string{"session", "delete", "s1"}, 0, "s1 deleted\n"},
		{[]string{"session", "prompt", "s1"}, ExitUsage, ""},
		{[]string{"session", "prompt", "s1", " "}, ExitUsage, ""},
		{[]string{"session", "prompt", "-o", "xml", "s1", "hi"}, ExitUsage, ""},
	} {
		out.Reset()
		errOut.Reset()
		if code := run(f, tc.args...); code != tc.code || out.String() != tc.stdout {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q", tc.args, code, out, errOut, tc.code, tc.stdout)
		}
	}
	if len(d.events) != 0 {
		t.Errorf("a refused prompt was stored")
	}

	out.Reset()
	if code := run(f, "session", "list"); code != 0 || !regexp.MustCompile(`^ID +SANDBOX +HARNESS +POLICY +STATE +EVENTS +AGE\ns1 +web +fake +ask +idle +0 +1h\n$`).MatchString(out.String()) {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	out.Reset()
	if code := run(f, "session", "get", "s1", "-o", "json"); code != 0 {
		t.Fatalf("get: exit %d", code)
	}
	var s api.Session
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.ID != "s1" || s.PermissionPolicy != api.PolicyAsk {
		t.Errorf("get -o json: %+v, %v", s, err)
	}
}

// TestAppendEventJSON: the fast JSON line of an event is the encoder's, byte for byte, for
// every field of api.SessionEvent set and unset; an event it cannot write so is left to the
// encoder.
func TestAppendEventJSON(t *testing.T) {
	// A field added to the event must be written by appendEventJSON too.
	var fields []string
	for f := range reflect.TypeFor[api.SessionEvent]().Fields() {
		fields = append(fields, f.Name)
	}
	if got := strings.Join(fields, " "); got != "Seq Type Time Data" {
		t.Fatalf("api.SessionEvent has the fields %s: teach appendEventJSON the new ones", got)
	}
	at := time.Date(2026, 11, 30, 20, 5, 1, 123456789, time.UTC)
	for _, tc := range []struct {
		name string
		ev   api.SessionEvent
		fast bool
	}{
		{"update", api.SessionEvent{Seq: 42, Type: api.EventUpdate, Time: at, Data: json.RawMessage(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"<b>é & \u2028\"x\"\\n"}}`)}, true},
		{"no data", api.SessionEvent{Seq: 1, Type: api.EventTurnEnd, Time: at}, true},
		{"zero time", api.SessionEvent{Seq: 7, Type: api.EventNotice, Data: json.RawMessage(`[1,2]`)}, true},
		{"offset zone", api.SessionEvent{Seq: 8, Type: api.EventPrompt, Time: at.In(time.FixedZone("", 5*3600+1800)), Data: json.RawMessage(`"a"`)}, true},
		{"type to escape", api.SessionEvent{Seq: 2, Type: `a"b`, Time: at}, false},
		{"data on two lines", api.SessionEvent{Seq: 3, Type: api.EventUpdate, Time: at, Data: json.RawMessage("{\n}")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(tc.ev); err != nil {
				t.Fatal(err)
			}
			got, ok := appendEventJSON(nil, tc.ev)
			if ok != tc.fast {
				t.Fatalf("appendEventJSON ok = %v, want %v", ok, tc.fast)
			}
			if ok && string(got) != want.String() {
				t.Fatalf("appendEventJSON = %s\nthe encoder writes %s", got, want.String())
			}
			var out bytes.Buffer
			if err := writeEvent(&out, "json", tc.ev); err != nil {
				t.Fatal(err)
			}
			if out.String() != want.String() {
				t.Fatalf("writeEvent = %s, want %s", out.String(), want.String())
			}
		})
	}
}

// A daemon that stops while a prompt is being sent gets it again with the same idempotency
// key once it answers; a daemon never reached is an error at once.
func TestPromptRidesOutADaemonRestart(t *testing.T) {
	var posts atomic.Int32
	keys := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys <- r.Header.Get(api.IdempotencyKeyHeader)
		if posts.Add(1) == 1 { // the daemon dies before it answers
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"seq": 5}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	var errOut strings.Builder
	acc, err := promptRidingRestarts(context.Background(), c, &SessionPromptOptions{Session: "s1", Text: "hi"}, &errOut)
	if err != nil || acc.Seq != 5 {
		t.Fatalf("prompt: %+v, %v", acc, err)
	}
	first, second := <-keys, <-keys
	if first == "" || first != second {
		t.Fatalf("idempotency keys %q then %q: want the same one twice", first, second)
	}
	if !strings.Contains(errOut.String(), "sending the prompt again") {
		t.Fatalf("stderr %q does not say the prompt is sent again", errOut.String())
	}

	gone, err := client.New("unix:///nonexistent/sandboxd.sock", "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := promptRidingRestarts(context.Background(), gone, &SessionPromptOptions{Session: "s1", Text: "hi"}, io.Discard); err == nil {
		t.Fatal("a prompt to no daemon succeeded")
	}
	if time.Since(start) > promptRideOut/2 {
		t.Fatal("a daemon never reached was waited for")
	}
}
