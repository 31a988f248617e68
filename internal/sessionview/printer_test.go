package sessionview

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

func chunk(kind, text string) map[string]any {
	return map[string]any{"sessionUpdate": kind, "content": map[string]any{"type": "text", "text": text}}
}

func TestErrorTextNamesTheLogOnce(t *testing.T) {
	d := api.ErrorData{Message: "harness fake exited with code 3; its log is /d/harness/box.log", HarnessLog: "/d/harness/box.log"}
	if got := ErrorText(d); got != d.Message {
		t.Errorf("ErrorText = %q, want the message alone", got)
	}
}

func TestPrinterKeepsLinesApart(t *testing.T) {
	ev := func(typ api.EventType, data any) api.SessionEvent {
		b, _ := json.Marshal(data)
		return api.SessionEvent{Type: typ, Data: b}
	}
	autoApproved := []api.SessionEvent{
		ev(api.EventUpdate, chunk("agent_message_chunk", "Hello")),
		ev(api.EventUpdate, chunk("agent_thought_chunk", "hmm")),
		ev(api.EventUpdate, map[string]any{"sessionUpdate": "tool_call", "toolCallId": "t'1", "title": "Run make"}),
		ev(api.EventPermission, api.PermissionData{ToolCallID: "t'1", Policy: api.PolicyAutoApprove,
			Options: []api.PermissionOption{{Kind: api.OptionAllowOnce}}}),
		ev(api.EventPermissionResolved, api.PermissionDecision{ToolCallID: "t'1", Outcome: api.OutcomeSelected, Kind: api.OptionAllowOnce, By: api.ResolvedByAutoApprove}),
		ev(api.EventUpdate, chunk("agent_message_chunk", " world")),
		ev(api.EventUpdate, chunk("agent_thought_chunk", "done?")),
	}
	for _, tc := range []struct {
		name     string
		shared   bool
		thoughts bool
		out, err string
	}{
		// One screen: the tool line must not land after "Hello", nor the text after a thought.
		{"shared screen", true, true, "", "Hello\nhmm\n▸ tool Run make [t'1]\n▸ auto-approved Run make [t'1] (allow_once)\n world\ndone?\n"},
		{"shared screen without thoughts", true, false, "", "Hello\n▸ tool Run make [t'1]\n▸ auto-approved Run make [t'1] (allow_once)\n world\n"},
		// Separate streams: stdout carries the text alone, with one final newline; the message
		// after the tool call starts a line of its own.
		{"separate", false, true, "Hello\n world\n", "hmm\n▸ tool Run make [t'1]\n▸ auto-approved Run make [t'1] (allow_once)\ndone?\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			o := PrinterOptions{Out: &out, ErrOut: &errOut, Session: "s1", Thoughts: tc.thoughts, Shared: tc.shared}
			if tc.shared {
				o.Out = &errOut // one screen
			}
			p := NewPrinter(o)
			for _, e := range autoApproved {
				p.Show(e)
			}
			p.Finish()
			if out.String() != tc.out || errOut.String() != tc.err {
				t.Errorf("stdout %q, stderr %q\nwant   %q, %q", out.String(), errOut.String(), tc.out, tc.err)
			}
		})
	}
	if got := shellQuote("t'1"); got != `'t'\''1'` {
		t.Errorf("shellQuote = %s", got)
	}
}

func TestSummary(t *testing.T) {
	ev := func(typ api.EventType, data string) api.SessionEvent {
		return api.SessionEvent{Type: typ, Data: json.RawMessage(data)}
	}
	for _, tc := range []struct {
		ev   api.SessionEvent
		want string
	}{
		{ev(api.EventPrompt, `{"text":"fix the tests"}`), `"fix the tests"`},
		{ev(api.EventUpdate, `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hi"}}`), `agent_message_chunk "Hi"`},
		{ev(api.EventUpdate, `{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"x"}}`), `agent_message_chunk`},
		{ev(api.EventUpdate, `{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Run make","kind":"execute","status":"pending"}`), `tool_call Run make (execute) [c1] pending`},
		{ev(api.EventUpdate, `{"sessionUpdate":"tool_call","toolCallId":"c1"}`), `tool_call a tool [c1]`},
		{ev(api.EventUpdate, `{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed"}`), `tool_call_update [c1] completed`},
		{ev(api.EventUpdate, `{"sessionUpdate":"plan","entries":[{"content":"a","status":"pending"},{"content":"b","status":"done"}]}`), `plan: 2 entries`},
		{ev(api.EventUpdate, `{"sessionUpdate":"current_mode_update","currentModeId":"plan"}`), `current_mode_update`},
		{ev(api.EventUpdate, `[1]`), `"[1]"`},
		{ev(api.EventPermissionResolved, `{"tool_call_id":"c1","outcome":"selected","kind":"allow_once","by":"operator","operator":"ann@box"}`), `[c1] selected allow_once by operator ann@box`},
		{ev(api.EventTurnEnd, `{"stop_reason":"end_turn"}`), `end_turn`},
	} {
		if got := Summary(tc.ev); got != tc.want {
			t.Errorf("Summary(%s %s) = %s, want %s", tc.ev.Type, tc.ev.Data, got, tc.want)
		}
	}
}
