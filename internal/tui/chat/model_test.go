package chat

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

var mainGo = "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n"

func toolCallEvent(id, title, kind, status string) api.SessionEvent {
	return update("tool_call", map[string]any{"toolCallId": id, "title": title, "kind": kind, "status": status})
}

func permissionAsk(id, title string, kinds ...string) api.SessionEvent {
	names := map[string]string{
		api.OptionAllowOnce: "Allow", api.OptionAllowAlways: "Always allow",
		api.OptionRejectOnce: "Reject", api.OptionRejectAlways: "Always reject",
	}
	var opts []api.PermissionOption
	for _, k := range kinds {
		opts = append(opts, api.PermissionOption{OptionID: "opt-" + k, Kind: k, Name: names[k]})
	}
	return ev(api.EventPermission, api.PermissionData{
		ToolCallID: id, Title: title, Options: opts, Policy: api.PolicyAsk,
		ToolCall: []byte(`{"toolCallId":"` + id + `","kind":"execute"}`),
	})
}

// resolved is a permission_resolved event; operator rides in the field the daemon adds to
// api.PermissionDecision.
func resolved(id, kind, operator string) api.SessionEvent {
	return ev(api.EventPermissionResolved, map[string]any{
		"tool_call_id": id, "outcome": api.OutcomeSelected, "option_id": "opt-" + kind, "kind": kind,
		"by": api.ResolvedByOperator, "operator": operator,
	})
}

// scenarios are recorded event sequences; each snap is a golden screen at 40 and 100 columns.
var scenarios = []struct {
	name   string
	height int // 24 unless set
	run    func(h *harness, snap func(string))
}{
	{"streaming", 0, func(h *harness, snap func(string)) {
		h.events(prompt("Explain what main.go does"))
		h.events(chunk("It prints a "), chunk("**greeting**.\n\nThe steps:\n\n"), chunk("1. import fmt\n2. call `Println`\n\n"))
		h.events(chunk("```go\nfmt.Println(\"hi\")\n"), chunk("```\n\nThat is all there is to"))
		snap("mid")
		h.events(chunk(" it."), turnEnd(api.StopReasonEndTurn))
		snap("end")
	}},
	{"thought", 0, func(h *harness, snap func(string)) {
		h.events(prompt("Why?"), thought("The user asks why.\nI should look at the code first.\n"),
			thought("Then answer briefly.\nThat is the plan."), chunk("Because it is simple."), turnEnd(api.StopReasonEndTurn))
		snap("collapsed")
		h.press("ctrl+o")
		snap("expanded")
	}},
	{"tools", 44, func(h *harness, snap func(string)) {
		h.events(prompt("Say hello to the world"),
			update("plan", map[string]any{"entries": []map[string]any{
				{"content": "Read main.go", "status": "in_progress", "priority": "high"},
				{"content": "Change the greeting", "status": "pending", "priority": "high"},
			}}),
			toolCallEvent("t1", "Read main.go", "read", "pending"))
		snap("running")
		h.events(update("tool_call_update", map[string]any{"toolCallId": "t1", "status": "completed",
			"content": []map[string]any{{"type": "content", "content": map[string]any{"type": "text", "text": mainGo}}}}),
			toolCallEvent("t2", "Edit main.go", "edit", "in_progress"),
			update("tool_call_update", map[string]any{"toolCallId": "t2", "status": "completed",
				"content": []map[string]any{{"type": "diff", "path": "main.go", "oldText": mainGo,
					"newText": strings.Replace(mainGo, `"hi"`, `"hello, world"`, 1)}}}),
			update("plan", map[string]any{"entries": []map[string]any{
				{"content": "Read main.go", "status": "completed", "priority": "high"},
				{"content": "Change the greeting", "status": "completed", "priority": "high"},
			}}),
			toolCallEvent("t3", "go run .", "execute", "failed"),
			update("some_future_update", map[string]any{"x": 1}),
			update("available_commands_update", map[string]any{"availableCommands": []any{}}),
			chunk("Done."), turnEnd(api.StopReasonEndTurn))
		snap("end")
	}},
	{"permission_here", 0, func(h *harness, snap func(string)) {
		h.events(prompt("Clean the build"), toolCallEvent("t1", "rm -rf build", "execute", "pending"),
			permissionAsk("t1", "rm -rf build", api.OptionAllowOnce, api.OptionAllowAlways, api.OptionRejectOnce))
		snap("open")
		h.press("y")
		snap("answering")
		h.events(resolved("t1", api.OptionAllowOnce, "alice@laptop"),
			update("tool_call_update", map[string]any{"toolCallId": "t1", "status": "completed"}), turnEnd(api.StopReasonEndTurn))
		snap("closed")
	}},
	{"permission_elsewhere", 0, func(h *harness, snap func(string)) {
		h.events(prompt("Push it"), permissionAsk("t9", "git push", api.OptionAllowOnce, api.OptionRejectOnce, api.OptionRejectAlways))
		h.press("down")
		snap("open")
		h.events(ev(api.EventPermissionResolved, api.PermissionDecision{ToolCallID: "t9", Outcome: api.OutcomeSelected,
			OptionID: "opt-reject_always", Kind: api.OptionRejectAlways, By: api.ResolvedByOperator}))
		snap("closed")
	}},
	{"notice_error", 0, func(h *harness, snap func(string)) {
		h.events(prompt("Go on"), ev(api.EventNotice, api.NoticeData{Message: "the harness restarted; the context was reset"}),
			ev(api.EventError, api.ErrorData{Message: "the harness exited with status 1", HarnessLog: "/var/lib/hiloop/logs/h.log"}),
			turnEnd(api.StopReasonError))
		snap("end")
	}},
	{"cancelled", 0, func(h *harness, snap func(string)) {
		h.events(prompt("Count to a million"), chunk("1, 2, 3, "))
		h.press("ctrl+c")
		snap("cancelling")
		h.events(chunk("4"), turnEnd(api.StopReasonCancelled))
		snap("end")
	}},
	{"reconnect", 0, func(h *harness, snap func(string)) {
		evs := []api.SessionEvent{prompt("Hello"), chunk("Hel"), chunk("lo "), chunk("there."), turnEnd(api.StopReasonEndTurn),
			prompt("Again"), chunk("Once "), chunk("more.")}
		for i := range evs {
			evs[i].Seq = uint64(i + 1)
		}
		h.send(EventsMsg(evs[:6]))
		h.send(ConnMsg{State: ConnReconnecting, Err: errors.New("connection reset")})
		snap("reconnecting")
		// The driver resumes from an older cursor than the model's: everything comes again.
		h.send(ConnMsg{State: ConnLive})
		h.send(EventsMsg(evs[2:]))
		h.send(EventsMsg(evs))
		snap("live")
	}},
}

func TestScreens(t *testing.T) {
	for _, sc := range scenarios {
		for _, w := range []int{40, 100} {
			t.Run(fmt.Sprintf("%s/%d", sc.name, w), func(t *testing.T) {
				height := sc.height
				if height == 0 {
					height = 24
				}
				h := newHarness(t, w, height, false)
				sc.run(h, func(step string) {
					t.Helper()
					golden(t, fmt.Sprintf("%s_%s_%d", sc.name, step, w), h.screen())
				})
			})
		}
	}
}

func TestReconnectDuplicatesNothing(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	once := newHarness(t, 60, 20, false)
	evs := []api.SessionEvent{prompt("Hello"), chunk("one "), chunk("two "), chunk("three"), turnEnd(api.StopReasonEndTurn)}
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
	}
	once.send(EventsMsg(evs))
	h.send(EventsMsg(evs[:3]))
	h.send(ConnMsg{State: ConnReconnecting})
	h.send(ConnMsg{State: ConnLive})
	h.send(EventsMsg(evs[1:]))
	h.send(EventsMsg(evs))
	if got, want := h.screen(), once.screen(); got != want {
		t.Errorf("after a reconnect the screen differs from one fed each event once\n--- got\n%s\n--- want\n%s", got, want)
	}
	if n := strings.Count(h.screen(), "one two three"); n != 1 {
		t.Errorf("the message shows %d times, want once:\n%s", n, h.screen())
	}
	if h.m.LastSeq() != 5 {
		t.Errorf("LastSeq = %d, want 5", h.m.LastSeq())
	}
}

func TestColourOnStyles(t *testing.T) {
	h := newHarness(t, 80, 24, true)
	h.events(prompt("Hi"), chunk("**bold** text"), toolCallEvent("t1", "ls", "execute", "completed"), turnEnd(api.StopReasonEndTurn))
	if s := h.screen(); !strings.Contains(s, "\x1b[") {
		t.Errorf("colour on, yet the screen holds no escape sequence:\n%q", s)
	}
}

func TestColourOffHasNoEscapes(t *testing.T) {
	h := newHarness(t, 80, 30, false)
	h.events(prompt("Hi"), thought("hmm"), chunk("# Title\n\n**bold** `code` [link](http://x)\n\n> quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"),
		toolCallEvent("t1", "ls", "execute", "completed"), permissionAsk("t2", "rm", api.OptionAllowOnce, api.OptionRejectOnce))
	h.press("?")
	for _, s := range []string{h.screen(), func() string { h.press("esc"); return h.screen() }()} {
		if strings.Contains(s, "\x1b") {
			t.Errorf("colour off, yet the screen holds an escape sequence:\n%q", s)
		}
	}
}

func TestUnknownAndUnreadableEvents(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	h.events(api.SessionEvent{Type: api.EventUpdate, Data: []byte(`{"sessionUpdate":`)},
		api.SessionEvent{Type: "from_the_future", Data: []byte(`{}`)},
		update("tool_call_update", map[string]any{"toolCallId": "never-announced", "status": "completed"}),
		api.SessionEvent{Type: api.EventPermission, Data: []byte(`[]`)})
	s := h.screen()
	for _, want := range []string{"update (unreadable)", "event from_the_future", "never-announced", "permission request (unreadable)"} {
		if !strings.Contains(s, want) {
			t.Errorf("screen lacks %q:\n%s", want, s)
		}
	}
}

// The sandbox's start shows on the status line; a start that fails says why.
func TestSandboxStartShows(t *testing.T) {
	h := newHarness(t, 100, 12, false)
	h.send(SandboxMsg{State: "starting"})
	if s := h.screen(); !strings.Contains(s, "web starting") {
		t.Errorf("status line does not show the start:\n%s", s)
	}
	h.send(SandboxMsg{State: "stopped", Err: errors.New("sandbox web is deleting")})
	if s := h.screen(); !strings.Contains(s, "web stopped") || !strings.Contains(s, "sandbox did not start: sandbox web is deleting") {
		t.Errorf("a failed start does not show:\n%s", s)
	}
}

// A sandbox that stops under the chat shows stopped; one deleted shows deleted and says so.
func TestSandboxStateFollows(t *testing.T) {
	h := newHarness(t, 100, 12, false)
	h.send(SandboxMsg{State: "stopped"})
	if s := h.screen(); !strings.Contains(s, "web stopped") || strings.Contains(s, "sandbox did not start") {
		t.Errorf("status line does not show the stop, or calls it a failed start:\n%s", s)
	}
	h.send(SandboxMsg{State: SandboxDeleted})
	if s := h.screen(); !strings.Contains(s, "web deleted") || !strings.Contains(s, "sandbox web is gone: it was deleted") {
		t.Errorf("a deleted sandbox does not show:\n%s", s)
	}
}
