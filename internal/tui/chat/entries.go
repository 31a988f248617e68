package chat

import (
	"encoding/json"
	"strings"

	"github.com/hiloop/hiloop/internal/acpview"
	"github.com/hiloop/hiloop/pkg/api"
)

// entryKind says what one item of the transcript is.
type entryKind uint8

const (
	kindPrompt     entryKind = iota // a prompt event, or user_message_chunks a harness replayed
	kindMessage                     // agent_message_chunks, merged
	kindThought                     // agent_thought_chunks, merged
	kindTool                        // a tool_call, updated in place by its tool_call_updates
	kindPlan                        // a turn's plan, replaced in place
	kindPermission                  // a permission request and, once known, its decision
	kindNotice
	kindError
	kindTurnEnd // a turn that stopped for another reason than end_turn
	kindInfo    // a compact line: a mode change, an update kind this version does not know
)

// entry is one logical item of the transcript with its rendering cache.
type entry struct {
	kind    entryKind
	text    []byte // prompt, message, thought, notice, error, turn end and info text
	msgID   string // an agent message's messageId, when the harness sends one
	tool    *toolCall
	plan    []planItem
	perm    *permission
	version uint32 // bumped on every change; part of the cache key
	final   bool   // a message that no longer streams (rendered as markdown as a whole)

	expanded bool

	// The rendering cache: lines for (cacheWidth, cacheVersion, cacheExpanded).
	cache         []string
	cacheWidth    int
	cacheVersion  uint32
	cacheExpanded bool
	cacheValid    bool

	// The markdown rendering of a streaming message's text up to prefixLen (see render.go).
	prefixLen   int
	prefixWidth int
	prefixLines []string
}

func (e *entry) changed() { e.version++ }

// expandable says whether the expand key does anything to e.
func (e *entry) expandable() bool { return e.kind == kindThought || e.kind == kindTool }

type toolCall struct {
	id, title, kind, status string
	content                 []acpview.ToolContent
	locations               []string
}

type planItem struct{ content, status string }

type permission struct {
	id       string
	title    string
	kind     string // the tool's kind, when known
	options  []api.PermissionOption
	policy   api.PermissionPolicy
	decision *api.PermissionDecision
	operator string // who answered, from the decision's optional operator field
}

// transcript holds the entries and the indexes that update them in place.
type transcript struct {
	entries []*entry
	tools   map[string]*entry // tool call id → its tool entry
	perms   map[string]*entry // tool call id → its permission entry
	plan    *entry            // the current turn's plan
	live    *entry            // the agent message or thought still streaming, if any

	prompts []string // every prompt of the session, oldest first (input history)

	running    bool     // a turn has started and not ended
	pending    []string // ask-policy permission requests without a decision, oldest first
	lastReason api.StopReason
}

func newTranscript() transcript {
	return transcript{tools: map[string]*entry{}, perms: map[string]*entry{}}
}

func (t *transcript) last() *entry {
	if len(t.entries) == 0 {
		return nil
	}
	return t.entries[len(t.entries)-1]
}

// add appends e; whatever streamed before it is finished.
func (t *transcript) add(e *entry) *entry {
	t.finishLive()
	t.entries = append(t.entries, e)
	return e
}

// finishLive marks the streaming message final, so it is rendered as markdown as a whole.
func (t *transcript) finishLive() {
	if t.live != nil {
		t.live.final = true
		t.live.changed()
		t.live = nil
	}
}

// apply folds one event into the transcript. It reports whether anything visible changed.
func (t *transcript) apply(ev api.SessionEvent) bool {
	switch ev.Type {
	case api.EventPrompt:
		var d api.PromptPost
		if json.Unmarshal(ev.Data, &d) != nil {
			return t.addLine(kindInfo, "prompt (unreadable)")
		}
		t.prompts = append(t.prompts, d.Text)
		t.running = true
		t.plan = nil
		t.add(&entry{kind: kindPrompt, text: []byte(d.Text)})
		return true
	case api.EventUpdate:
		return t.applyUpdate(ev.Data)
	case api.EventPermission:
		var d api.PermissionData
		if json.Unmarshal(ev.Data, &d) != nil {
			return t.addLine(kindInfo, "permission request (unreadable)")
		}
		return t.applyPermission(d)
	case api.EventPermissionResolved:
		var d api.PermissionDecision
		if json.Unmarshal(ev.Data, &d) != nil {
			return t.addLine(kindInfo, "permission decision (unreadable)")
		}
		// The operator field is newer than this package's copy of the api types may be.
		var who struct {
			Operator string `json:"operator"`
		}
		_ = json.Unmarshal(ev.Data, &who)
		return t.applyDecision(d, who.Operator)
	case api.EventTurnEnd:
		var d api.TurnEndData
		_ = json.Unmarshal(ev.Data, &d)
		t.running = false
		t.lastReason = d.StopReason
		t.finishLive()
		if d.StopReason == api.StopReasonEndTurn || d.StopReason == "" {
			return true // the status line changes
		}
		t.add(&entry{kind: kindTurnEnd, text: []byte(d.StopReason)})
		return true
	case api.EventError:
		var d api.ErrorData
		_ = json.Unmarshal(ev.Data, &d)
		msg := d.Message
		if d.HarnessLog != "" && !strings.Contains(msg, d.HarnessLog) {
			msg += " (harness log: " + d.HarnessLog + ")"
		}
		return t.addLine(kindError, firstNonEmpty(msg, "the turn failed"))
	case api.EventNotice:
		var d api.NoticeData
		_ = json.Unmarshal(ev.Data, &d)
		return t.addLine(kindNotice, d.Message)
	}
	return t.addLine(kindInfo, "event "+string(ev.Type))
}

func (t *transcript) addLine(kind entryKind, text string) bool {
	t.add(&entry{kind: kind, text: []byte(text)})
	return true
}

// chunkKinds are the update kinds whose consecutive chunks merge into one entry.
var chunkKinds = map[acpview.Kind]entryKind{
	acpview.KindAgentMessageChunk: kindMessage,
	acpview.KindAgentThoughtChunk: kindThought,
	acpview.KindUserMessageChunk:  kindPrompt,
}

func (t *transcript) applyUpdate(data json.RawMessage) bool {
	u, err := acpview.Decode(data)
	if err != nil {
		return t.addLine(kindInfo, "update (unreadable)")
	}
	if kind, ok := chunkKinds[u.Kind]; ok {
		msgID := ""
		if u.MessageID != nil {
			msgID = *u.MessageID
		}
		return t.applyChunk(kind, u.Block.Show(), msgID)
	}
	return t.applyOther(u)
}

// applyChunk merges a chunk into the entry it continues, or starts one.
func (t *transcript) applyChunk(kind entryKind, text, msgID string) bool {
	last := t.last()
	if last != nil && last.kind == kind && !last.final &&
		(kind != kindPrompt || t.live == last) && (msgID == "" || last.msgID == "" || msgID == last.msgID) {
		if text == "" {
			return false
		}
		last.text = append(last.text, text...)
		last.changed()
		return true
	}
	t.live = t.add(&entry{kind: kind, text: []byte(text), msgID: msgID})
	return true
}

// applyOther applies an update that is not a chunk.
func (t *transcript) applyOther(u acpview.Update) bool {
	switch u.Kind {
	case acpview.KindToolCall, acpview.KindToolCallUpdate:
		e := t.tools[u.ToolCallID]
		if e == nil {
			e = t.add(&entry{kind: kindTool, tool: &toolCall{id: u.ToolCallID}})
			t.tools[u.ToolCallID] = e
		}
		tc := e.tool
		if u.Title != nil {
			tc.title = *u.Title
		}
		if u.ToolKind != nil {
			tc.kind = *u.ToolKind
		}
		if u.Status != nil {
			tc.status = *u.Status
		}
		if u.HasContent {
			tc.content = u.Content
		}
		if u.Locations != nil {
			tc.locations = tc.locations[:0]
			for _, l := range u.Locations {
				tc.locations = append(tc.locations, l.Path)
			}
		}
		e.changed()
		return true
	case acpview.KindPlan:
		items := make([]planItem, len(u.Entries))
		for i, pe := range u.Entries {
			items[i] = planItem{content: pe.Content, status: pe.Status}
		}
		if t.plan == nil {
			t.plan = t.add(&entry{kind: kindPlan})
		}
		t.plan.plan = items
		t.plan.changed()
		return true
	case acpview.KindCurrentModeUpdate:
		return t.addLine(kindInfo, "mode: "+u.CurrentModeID)
	case acpview.KindAvailableCommandsUpdate, acpview.KindConfigOptionUpdate, acpview.KindSessionInfoUpdate, acpview.KindUsageUpdate:
		return false // state for menus and the status line, nothing to read in a transcript
	}
	return t.addLine(kindInfo, "update: "+firstNonEmpty(string(u.Kind), "(no kind)"))
}

func (t *transcript) applyPermission(d api.PermissionData) bool {
	e := t.perms[d.ToolCallID]
	if e == nil {
		e = t.add(&entry{kind: kindPermission, perm: &permission{id: d.ToolCallID}})
		t.perms[d.ToolCallID] = e
	}
	p := e.perm
	p.options, p.policy = d.Options, d.Policy
	p.title = d.Title
	if tc, err := acpview.Decode(d.ToolCall); err == nil {
		if p.title == "" && tc.Title != nil {
			p.title = *tc.Title
		}
		if tc.ToolKind != nil {
			p.kind = *tc.ToolKind
		}
	}
	if tool := t.tools[d.ToolCallID]; tool != nil {
		p.title = firstNonEmpty(p.title, tool.tool.title)
		p.kind = firstNonEmpty(p.kind, tool.tool.kind)
	}
	if p.decision == nil && d.Policy != api.PolicyAutoApprove {
		t.pending = append(t.pending, d.ToolCallID)
	}
	e.changed()
	return true
}

func (t *transcript) applyDecision(d api.PermissionDecision, operator string) bool {
	e := t.perms[d.ToolCallID]
	if e == nil {
		e = t.add(&entry{kind: kindPermission, perm: &permission{id: d.ToolCallID}})
		t.perms[d.ToolCallID] = e
		if tool := t.tools[d.ToolCallID]; tool != nil {
			e.perm.title = tool.tool.title
		}
	}
	e.perm.decision = &d
	e.perm.operator = operator
	for i, id := range t.pending {
		if id == d.ToolCallID {
			t.pending = append(t.pending[:i], t.pending[i+1:]...)
			break
		}
	}
	e.changed()
	return true
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
