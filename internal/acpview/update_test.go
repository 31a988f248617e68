package acpview

import (
	"encoding/json"
	"reflect"
	"testing"

	acp "github.com/coder/acp-go-sdk"
)

// sdkUpdates is one update of every kind as the ACP SDK marshals it, with the kind it must be.
func sdkUpdates() map[Kind]acp.SessionUpdate {
	title := "new title"
	return map[Kind]acp.SessionUpdate{
		KindUserMessageChunk:  {UserMessageChunk: &acp.SessionUpdateUserMessageChunk{Content: acp.TextBlock("hi")}},
		KindAgentMessageChunk: acp.UpdateAgentMessageText("hello"),
		KindAgentThoughtChunk: acp.UpdateAgentThoughtText("hmm"),
		KindToolCall: acp.StartToolCall("call-1", "Read file", acp.WithStartKind(acp.ToolKindRead),
			acp.WithStartStatus(acp.ToolCallStatusPending), acp.WithStartLocations([]acp.ToolCallLocation{{Path: "/a"}})),
		KindToolCallUpdate: acp.UpdateToolCall("call-1", acp.WithUpdateStatus(acp.ToolCallStatusCompleted),
			acp.WithUpdateTitle(title), acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolContent(acp.TextBlock("out")), acp.ToolDiffContent("/a", "new", "old")})),
		KindPlan:                    acp.UpdatePlan(acp.PlanEntry{Content: "step", Status: acp.PlanEntryStatusPending, Priority: acp.PlanEntryPriorityMedium}),
		KindAvailableCommandsUpdate: {AvailableCommandsUpdate: &acp.SessionAvailableCommandsUpdate{AvailableCommands: []acp.AvailableCommand{}}},
		KindCurrentModeUpdate:       {CurrentModeUpdate: &acp.SessionCurrentModeUpdate{CurrentModeId: "plan"}},
		KindConfigOptionUpdate:      {ConfigOptionUpdate: &acp.SessionConfigOptionUpdate{ConfigOptions: []acp.SessionConfigOption{}}},
		KindSessionInfoUpdate:       {SessionInfoUpdate: &acp.SessionSessionInfoUpdate{}},
		KindUsageUpdate:             {UsageUpdate: &acp.SessionUsageUpdate{Used: 1200, Size: 200000}},
	}
}

// TestKindsMatchSDK checks every kind against the discriminator the SDK writes, so a renamed
// or added variant is noticed here and not in a transcript.
func TestKindsMatchSDK(t *testing.T) {
	for kind, su := range sdkUpdates() {
		b, err := json.Marshal(su)
		if err != nil {
			t.Fatalf("%s: marshal: %v", kind, err)
		}
		var d struct {
			SessionUpdate string `json:"sessionUpdate"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		if d.SessionUpdate != string(kind) {
			t.Errorf("the SDK writes %q for the update this package calls %q", d.SessionUpdate, kind)
		}
		u, err := Decode(b)
		if err != nil || u.Kind != kind {
			t.Errorf("Decode(%s) = kind %q, %v", b, u.Kind, err)
		}
	}
}

func TestDecodeFromSDK(t *testing.T) {
	decode := func(k Kind) Update {
		b, err := json.Marshal(sdkUpdates()[k])
		if err != nil {
			t.Fatal(err)
		}
		u, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(%s): %v", b, err)
		}
		return u
	}
	if got, ok := decode(KindAgentMessageChunk).Text(); !ok || got != "hello" {
		t.Errorf("message chunk text = %q, %v", got, ok)
	}
	tc := decode(KindToolCall)
	if tc.ToolCallID != "call-1" || tc.TitleText() != "Read file" || deref(tc.ToolKind) != "read" ||
		deref(tc.Status) != "pending" || !reflect.DeepEqual(tc.Locations, []Location{{Path: "/a"}}) || tc.HasContent {
		t.Errorf("tool call = %+v", tc)
	}
	up := decode(KindToolCallUpdate)
	old := "old"
	want := []ToolContent{{Type: "content", Text: "out"}, {Type: "diff", Path: "/a", OldText: &old, NewText: "new"}}
	if up.ToolKind != nil || deref(up.Status) != "completed" || up.TitleText() != "new title" || !up.HasContent || !reflect.DeepEqual(up.Content, want) {
		t.Errorf("tool call update = %+v, content %+v", up, up.Content)
	}
	if p := decode(KindPlan); !reflect.DeepEqual(p.Entries, []PlanEntry{{Content: "step", Status: "pending"}}) {
		t.Errorf("plan entries = %+v", p.Entries)
	}
	if m := decode(KindCurrentModeUpdate); m.CurrentModeID != "plan" {
		t.Errorf("mode = %q", m.CurrentModeID)
	}
	if us := decode(KindUsageUpdate); us.Used != 1200 || us.Size != 200000 {
		t.Errorf("usage = %d/%d", us.Used, us.Size)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		wantErr  bool
		check    func(Update) bool
	}{
		{"not an object", `[1]`, true, nil},
		{"unknown kind", `{"sessionUpdate":"new_thing"}`, false, func(u Update) bool { return u.Kind == "new_thing" }},
		{"chunk with an image", `{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"x"}}`, false,
			func(u Update) bool { _, ok := u.Text(); return !ok && u.Block.Show() == "[image]" }},
		{"chunk whose content is not a block", `{"sessionUpdate":"agent_thought_chunk","content":"text"}`, false,
			func(u Update) bool { return u.Kind == KindAgentThoughtChunk && u.Block.Show() == "" }},
		{"kind sniffed from a nested key", `{"content":{"type":"text","text":"x","sessionUpdate":"agent_message_chunk"},"sessionUpdate":"tool_call","toolCallId":"t"}`, false,
			func(u Update) bool { return u.Kind == KindToolCall && u.ToolCallID == "t" }},
		{"tool call update clearing content", `{"sessionUpdate":"tool_call_update","toolCallId":"t","content":[]}`, false,
			func(u Update) bool { return u.HasContent && len(u.Content) == 0 && u.Title == nil && u.Status == nil }},
		{"tool call update with null content", `{"sessionUpdate":"tool_call_update","toolCallId":"t","content":null}`, false,
			func(u Update) bool { return !u.HasContent }},
		{"resource link", `{"sessionUpdate":"user_message_chunk","content":{"type":"resource_link","uri":"file:///a","name":""}}`, false,
			func(u Update) bool { return u.Block.Show() == "[file:///a]" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := Decode([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("Decode(%s) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if tc.check != nil && !tc.check(u) {
				t.Errorf("Decode(%s) = %+v", tc.in, u)
			}
		})
	}
}

// FuzzDecode feeds Decode what a harness may send. Decode must not panic, and its fast path
// for chunks must read a chunk as the full decode does.
func FuzzDecode(f *testing.F) {
	for _, su := range sdkUpdates() {
		b, err := json.Marshal(su)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := Decode(data)
		full, ferr := decodeFull(data)
		if (err == nil) != (ferr == nil) {
			if _, fast := decodeChunk(data); !fast || err != nil {
				t.Fatalf("Decode error %v, full decode error %v", err, ferr)
			}
			return // the fast path reads fewer fields, so it reads some chunks the full decode refuses
		}
		if err != nil {
			return
		}
		if u.Kind != full.Kind || !reflect.DeepEqual(u.Block, full.Block) || !reflect.DeepEqual(u.MessageID, full.MessageID) {
			t.Fatalf("fast path %+v, full decode %+v", u, full)
		}
		if u.Kind.IsChunk() {
			_ = u.Block.Show()
		}
	})
}
