package chat

import (
	"bytes"
	"encoding/json"
	"strings"

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
	content                 []toolContent
	locations               []string
}

// toolContent is one ACP ToolCallContent: text (type "content"), a diff or a terminal.
type toolContent struct {
	typ      string
	text     string
	path     string
	oldText  *string
	newText  string
	terminal string
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

// acpUpdate is the part of an ACP SessionUpdate the chat shows. Content stays raw: a
// ContentBlock in chunks, a list of ToolCallContent in tool calls.
type acpUpdate struct {
	SessionUpdate string          `json:"sessionUpdate"`
	Content       json.RawMessage `json:"content"`
	MessageID     *string         `json:"messageId"`
	ToolCallID    string          `json:"toolCallId"`
	Title         *string         `json:"title"`
	Kind          *string         `json:"kind"`
	Status        *string         `json:"status"`
	Locations     []struct {
		Path string `json:"path"`
	} `json:"locations"`
	Entries []struct {
		Content string `json:"content"`
		Status  string `json:"status"`
	} `json:"entries"`
	CurrentModeID string `json:"currentModeId"`
}

// contentBlock is an ACP ContentBlock, reduced to what a transcript shows of it.
type contentBlock struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	URI      string `json:"uri"`
	Name     string `json:"name"`
	Resource *struct {
		URI  string `json:"uri"`
		Text string `json:"text"`
	} `json:"resource"`
}

// show is how a content block reads in a transcript: its text, or a placeholder naming it.
func (b contentBlock) show() string {
	switch b.Type {
	case "text":
		return b.Text
	case "resource_link":
		return "[" + firstNonEmpty(b.Name, b.URI) + "]"
	case "resource":
		if b.Resource != nil {
			if b.Resource.Text != "" {
				return b.Resource.Text
			}
			return "[" + b.Resource.URI + "]"
		}
	case "":
		return ""
	}
	return "[" + b.Type + "]"
}

type rawToolContent struct {
	Type       string          `json:"type"`
	Content    json.RawMessage `json:"content"`
	Path       string          `json:"path"`
	OldText    *string         `json:"oldText"`
	NewText    string          `json:"newText"`
	TerminalID string          `json:"terminalId"`
}

func decodeToolContent(raw json.RawMessage) []toolContent {
	var list []rawToolContent
	if json.Unmarshal(raw, &list) != nil {
		return nil
	}
	out := make([]toolContent, 0, len(list))
	for _, c := range list {
		tc := toolContent{typ: c.Type, path: c.Path, oldText: c.OldText, newText: c.NewText, terminal: c.TerminalID}
		if c.Type == "content" {
			var b contentBlock
			if json.Unmarshal(c.Content, &b) == nil {
				tc.text = b.show()
			}
		}
		out = append(out, tc)
	}
	return out
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
var chunkKinds = map[string]entryKind{
	"agent_message_chunk": kindMessage,
	"agent_thought_chunk": kindThought,
	"user_message_chunk":  kindPrompt,
}

// chunkUpdate is a message, thought or user chunk: decoded in one pass, as most updates are.
type chunkUpdate struct {
	SessionUpdate string       `json:"sessionUpdate"`
	Content       contentBlock `json:"content"`
	MessageID     *string      `json:"messageId"`
}

// sniffKind finds an update's kind without decoding it. It may be fooled by a nested object
// with the same key, so what it finds is checked by the decode it picks.
func sniffKind(data []byte) string {
	const key = `"sessionUpdate"`
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return ""
	}
	rest := bytes.TrimLeft(data[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return ""
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	if len(rest) == 0 || rest[0] != '"' {
		return ""
	}
	end := bytes.IndexByte(rest[1:], '"')
	if end < 0 {
		return ""
	}
	return string(rest[1 : 1+end])
}

func (t *transcript) applyUpdate(data json.RawMessage) bool {
	if kind, ok := chunkKinds[sniffKind(data)]; ok {
		var c chunkUpdate
		if json.Unmarshal(data, &c) == nil && chunkKinds[c.SessionUpdate] == kind {
			msgID := ""
			if c.MessageID != nil {
				msgID = *c.MessageID
			}
			return t.applyChunk(kind, c.Content.show(), msgID)
		}
	}
	var u acpUpdate
	if json.Unmarshal(data, &u) != nil {
		return t.addLine(kindInfo, "update (unreadable)")
	}
	if kind, ok := chunkKinds[u.SessionUpdate]; ok {
		var b contentBlock
		_ = json.Unmarshal(u.Content, &b)
		msgID := ""
		if u.MessageID != nil {
			msgID = *u.MessageID
		}
		return t.applyChunk(kind, b.show(), msgID)
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
func (t *transcript) applyOther(u acpUpdate) bool {
	switch u.SessionUpdate {
	case "tool_call", "tool_call_update":
		e := t.tools[u.ToolCallID]
		if e == nil {
			e = t.add(&entry{kind: kindTool, tool: &toolCall{id: u.ToolCallID}})
			t.tools[u.ToolCallID] = e
		}
		tc := e.tool
		if u.Title != nil {
			tc.title = *u.Title
		}
		if u.Kind != nil {
			tc.kind = *u.Kind
		}
		if u.Status != nil {
			tc.status = *u.Status
		}
		if len(u.Content) > 0 && !bytes.Equal(u.Content, []byte("null")) {
			tc.content = decodeToolContent(u.Content)
		}
		if u.Locations != nil {
			tc.locations = tc.locations[:0]
			for _, l := range u.Locations {
				tc.locations = append(tc.locations, l.Path)
			}
		}
		e.changed()
		return true
	case "plan":
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
	case "current_mode_update":
		return t.addLine(kindInfo, "mode: "+u.CurrentModeID)
	case "available_commands_update", "config_option_update", "session_info_update", "usage_update":
		return false // state for menus and the status line, nothing to read in a transcript
	}
	return t.addLine(kindInfo, "update: "+firstNonEmpty(u.SessionUpdate, "(no kind)"))
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
	var tc acpUpdate
	if json.Unmarshal(d.ToolCall, &tc) == nil {
		if p.title == "" && tc.Title != nil {
			p.title = *tc.Title
		}
		if tc.Kind != nil {
			p.kind = *tc.Kind
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
