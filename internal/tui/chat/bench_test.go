package chat

import (
	"strconv"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/hiloop/hiloop/pkg/api"
)

// recordedSession is n events of turns shaped like a coding agent's: a prompt, thought chunks,
// a plan, tool calls with updates and a diff, an auto-approved permission, message chunks in
// paragraphs and code, and the turn's end.
func recordedSession(n int) []api.SessionEvent {
	var evs []api.SessionEvent
	add := func(e api.SessionEvent) {
		e.Seq = uint64(len(evs) + 1)
		evs = append(evs, e)
	}
	for turn := 0; len(evs) < n; turn++ {
		t := strconv.Itoa(turn)
		add(prompt("Turn " + t + ": fix the failing test in pkg/thing and explain the change"))
		for i := range 10 {
			add(thought("considering option " + strconv.Itoa(i) + " of the fix. "))
		}
		add(update("plan", map[string]any{"entries": []map[string]any{
			{"content": "Read the test", "status": "in_progress", "priority": "high"},
			{"content": "Fix it", "status": "pending", "priority": "high"}}}))
		id := "call-" + t
		add(toolCallEvent(id, "Edit pkg/thing/thing.go", "edit", "pending"))
		add(ev(api.EventPermission, api.PermissionData{ToolCallID: id, Policy: api.PolicyAutoApprove,
			Options: []api.PermissionOption{{OptionID: "a", Kind: api.OptionAllowOnce, Name: "Allow"}}}))
		add(ev(api.EventPermissionResolved, api.PermissionDecision{ToolCallID: id, Outcome: api.OutcomeSelected,
			Kind: api.OptionAllowOnce, By: api.ResolvedByAutoApprove}))
		add(update("tool_call_update", map[string]any{"toolCallId": id, "status": "completed",
			"content": []map[string]any{{"type": "diff", "path": "pkg/thing/thing.go", "oldText": mainGo,
				"newText": strings.Replace(mainGo, "hi", "hello "+t, 1)}}}))
		add(toolCallEvent(id+"-run", "go test ./pkg/thing", "execute", "in_progress"))
		add(update("tool_call_update", map[string]any{"toolCallId": id + "-run", "status": "completed",
			"content": []map[string]any{{"type": "content", "content": map[string]any{"type": "text", "text": "ok  \tpkg/thing\t0.01s\n"}}}}))
		for i := range 70 {
			text := "word" + strconv.Itoa(i) + " "
			switch i % 20 {
			case 9:
				text = "done.\n\n"
			case 14:
				text = "\n```go\nfmt.Println(1)\n```\n\n"
			}
			add(chunk(text))
		}
		add(turnEnd(api.StopReasonEndTurn))
	}
	return evs[:n]
}

// BenchmarkOpen100k opens a session of 100,000 stored events as the driver does (pages of
// api.MaxEventsPage) and renders the first screen at 120x40.
func BenchmarkOpen100k(b *testing.B) {
	evs := recordedSession(100_000)
	b.ReportAllocs()
	for b.Loop() {
		m := New(Options{Sandbox: "web", SandboxState: "running", Session: api.Session{ID: "s1", Harness: "fake"},
			Backend: &recordingBackend{}})
		m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
		for i := 0; i < len(evs); i += api.MaxEventsPage {
			m.Update(EventsMsg(evs[i:min(len(evs), i+api.MaxEventsPage)]))
		}
		m.Update(HistoryDoneMsg{})
		m.Update(ConnMsg{State: ConnLive})
		if v := m.View(); !strings.Contains(v.Content, "word") {
			b.Fatalf("the first screen shows no agent text:\n%s", v.Content)
		}
	}
}

// BenchmarkStreamChunk is one live agent_message_chunk deep into a long message: the update and
// a redraw after it (the frame throttle off).
func BenchmarkStreamChunk(b *testing.B) {
	m := New(Options{Sandbox: "web", Session: api.Session{ID: "s1"}, Backend: &recordingBackend{}, Colour: true})
	m.frame = 0 // the cost of a redraw; at most 60 a second happen
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	seq := uint64(1)
	m.Update(EventsMsg{func() api.SessionEvent { e := prompt("go"); e.Seq = seq; return e }()})
	next := func(text string) EventsMsg {
		seq++
		e := chunk(text)
		e.Seq = seq
		return EventsMsg{e}
	}
	for i := range 2000 {
		text := "some words of a long answer "
		if i%25 == 24 {
			text = "end of a paragraph.\n\n"
		}
		m.Update(next(text))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		text := "more "
		if i%25 == 0 {
			text = "paragraph.\n\n"
		}
		m.Update(next(text))
		_ = m.View()
	}
}
