// Package acpview decodes an ACP session update (the data of a session's "update" event: the
// raw JSON of a session/update notification's update, as the event log stores it) into one
// typed view: a message, thought or user chunk, a tool call and its updates, a plan, a mode
// change, usage. The CLI's printer and the chat TUI read this view; the fake harness takes its
// kind strings from here, so what it emits and what is decoded cannot drift apart.
//
// It is a leaf: encoding/json only, no styles, no terminals, so that the daemon may read
// updates with it without importing a renderer (internal/sessionview renders for people).
package acpview

import (
	"bytes"
	"encoding/json"
)

// Kind is an update's sessionUpdate discriminator.
type Kind string

// The kinds of ACP session update (acp-go-sdk's SessionUpdate variants; TestKindsMatchSDK
// checks them against what the SDK marshals).
const (
	KindUserMessageChunk        Kind = "user_message_chunk"
	KindAgentMessageChunk       Kind = "agent_message_chunk"
	KindAgentThoughtChunk       Kind = "agent_thought_chunk"
	KindToolCall                Kind = "tool_call"
	KindToolCallUpdate          Kind = "tool_call_update"
	KindPlan                    Kind = "plan"
	KindAvailableCommandsUpdate Kind = "available_commands_update"
	KindCurrentModeUpdate       Kind = "current_mode_update"
	KindConfigOptionUpdate      Kind = "config_option_update"
	KindSessionInfoUpdate       Kind = "session_info_update"
	KindUsageUpdate             Kind = "usage_update"
)

// IsChunk says whether updates of kind k carry one ContentBlock of a message, thought or
// user message, which consecutive updates continue.
func (k Kind) IsChunk() bool {
	return k == KindAgentMessageChunk || k == KindAgentThoughtChunk || k == KindUserMessageChunk
}

// IsToolCall says whether k is a tool call or an update of one.
func (k Kind) IsToolCall() bool { return k == KindToolCall || k == KindToolCallUpdate }

// Update is the view of one session update: the fields of every kind, each set for the kinds
// that carry it. Pointers are fields a tool_call_update may leave out (nil: unchanged).
type Update struct {
	Kind Kind

	// Block is a chunk's content (or an unknown kind's, where it reads as one).
	Block     ContentBlock
	MessageID *string

	// A tool call's fields. HasContent says the update carried content (which then replaces
	// the call's: Content may be empty, or nil where it could not be read).
	ToolCallID string
	Title      *string
	ToolKind   *string
	Status     *string
	Content    []ToolContent
	HasContent bool
	Locations  []Location

	// Entries is a plan's, the whole plan.
	Entries []PlanEntry

	// CurrentModeID is a mode change's new mode.
	CurrentModeID string

	// Used and Size are a usage update's tokens in the context window and its size.
	Used, Size int64
}

// Location is a file a tool call works on.
type Location struct {
	Path string `json:"path"`
}

// PlanEntry is one step of a plan.
type PlanEntry struct {
	Content string `json:"content"`
	Status  string `json:"status"`
}

// TitleText returns the tool call's title, or "" where the update has none.
func (u Update) TitleText() string { return deref(u.Title) }

// Text returns a chunk's text, if it is a text chunk.
func (u Update) Text() (string, bool) {
	if u.Block.Type != "text" {
		return "", false
	}
	return u.Block.Text, true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// wire is an update as it comes; Content stays raw until the kind says what it is.
type wire struct {
	SessionUpdate Kind            `json:"sessionUpdate"`
	Content       json.RawMessage `json:"content"`
	MessageID     *string         `json:"messageId"`
	ToolCallID    string          `json:"toolCallId"`
	Title         *string         `json:"title"`
	Kind          *string         `json:"kind"`
	Status        *string         `json:"status"`
	Locations     []Location      `json:"locations"`
	Entries       []PlanEntry     `json:"entries"`
	CurrentModeID string          `json:"currentModeId"`
	Used          int64           `json:"used"`
	Size          int64           `json:"size"`
}

// chunkWire is a chunk, decoded in one pass, as most updates are.
type chunkWire struct {
	SessionUpdate Kind         `json:"sessionUpdate"`
	Content       ContentBlock `json:"content"`
	MessageID     *string      `json:"messageId"`
}

// Decode reads one update. It fails only where the update is not a JSON object of the fields'
// types; an unknown kind decodes, with its Kind, for the reader to name. A chunk's or a tool
// call's content that cannot be read is left empty rather than failing the update.
func Decode(data []byte) (Update, error) {
	if u, ok := decodeChunk(data); ok {
		return u, nil
	}
	return decodeFull(data)
}

// decodeChunk is Decode's fast path for the commonest updates, a chunk's: one pass, no raw
// content kept. It reads a chunk as decodeFull does (FuzzDecode checks that).
func decodeChunk(data []byte) (Update, bool) {
	if !sniffKind(data).IsChunk() {
		return Update{}, false
	}
	var c chunkWire
	if json.Unmarshal(data, &c) != nil || !c.SessionUpdate.IsChunk() {
		return Update{}, false
	}
	return Update{Kind: c.SessionUpdate, Block: c.Content, MessageID: c.MessageID}, true
}

func decodeFull(data []byte) (Update, error) {
	var w wire
	if err := json.Unmarshal(data, &w); err != nil {
		return Update{}, err
	}
	u := Update{
		Kind: w.SessionUpdate, MessageID: w.MessageID,
		ToolCallID: w.ToolCallID, Title: w.Title, ToolKind: w.Kind, Status: w.Status,
		Locations: w.Locations, Entries: w.Entries, CurrentModeID: w.CurrentModeID,
		Used: w.Used, Size: w.Size,
	}
	switch {
	case u.Kind.IsToolCall():
		if len(w.Content) > 0 && !bytes.Equal(w.Content, []byte("null")) {
			u.Content, u.HasContent = decodeToolContent(w.Content), true
		}
	case len(w.Content) > 0 && w.Content[0] == '{':
		// A chunk's block, or the content of a kind this package does not know, which may
		// well be a block too: what it reads of it, as the fast path would. (Only an object
		// can be one: a tool call's list, as in a permission request's, costs nothing here.)
		var b ContentBlock // not &u.Block, which would put every u on the heap
		_ = json.Unmarshal(w.Content, &b)
		u.Block = b
	}
	return u, nil
}

// sniffKind finds an update's kind without decoding it. It may be fooled by a nested object
// with the same key, so what it finds is checked by the decode it picks.
func sniffKind(data []byte) Kind {
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
	return Kind(rest[1 : 1+end])
}

// ContentBlock is an ACP ContentBlock, reduced to what a transcript shows of it.
type ContentBlock struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	URI      string `json:"uri"`
	Name     string `json:"name"`
	Resource *struct {
		URI  string `json:"uri"`
		Text string `json:"text"`
	} `json:"resource"`
}

// Show is how a content block reads in a transcript: its text, or a placeholder naming it.
func (b ContentBlock) Show() string {
	switch b.Type {
	case "text":
		return b.Text
	case "resource_link":
		if b.Name != "" {
			return "[" + b.Name + "]"
		}
		return "[" + b.URI + "]"
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

// ToolContent is one ACP ToolCallContent: text (Type "content"), a diff or a terminal.
type ToolContent struct {
	Type     string
	Text     string // a content block's, as Show reads it
	Path     string
	OldText  *string // nil for a new file
	NewText  string
	Terminal string
}

type toolContentWire struct {
	Type       string          `json:"type"`
	Content    json.RawMessage `json:"content"`
	Path       string          `json:"path"`
	OldText    *string         `json:"oldText"`
	NewText    string          `json:"newText"`
	TerminalID string          `json:"terminalId"`
}

func decodeToolContent(raw json.RawMessage) []ToolContent {
	var list []toolContentWire
	if json.Unmarshal(raw, &list) != nil {
		return nil
	}
	out := make([]ToolContent, 0, len(list))
	for _, c := range list {
		tc := ToolContent{Type: c.Type, Path: c.Path, OldText: c.OldText, NewText: c.NewText, Terminal: c.TerminalID}
		if c.Type == "content" {
			var b ContentBlock
			if json.Unmarshal(c.Content, &b) == nil {
				tc.Text = b.Show()
			}
		}
		out = append(out, tc)
	}
	return out
}
