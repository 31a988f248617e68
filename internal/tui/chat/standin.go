// Package chat is the bubbletea model of one chat on one session.
//
// STAND-IN: this file is a minimal stand-in with the API the chat model promises (Backend,
// Options, New, EventsMsg, HistoryDoneMsg, ConnMsg, SessionMsg, SandboxMsg, LastSeq), so that
// `hiloop chat` and its driver build and run before the real model lands. It renders events as
// plain lines. At merge the real package replaces it: delete this file.
package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/hiloop/hiloop/pkg/api"
)

// Backend does what the user asks of the session. Each call returns when the daemon answered;
// the model runs them in tea.Cmds, never in Update.
type Backend interface {
	Prompt(ctx context.Context, text string) error
	Cancel(ctx context.Context) error
	Answer(ctx context.Context, toolCallID, optionKind string) error
}

// Options configure a chat model.
type Options struct {
	Sandbox      string      // the sandbox's name
	SandboxState string      // its state when the chat opened
	Session      api.Session // the session as the daemon reported it
	Backend      Backend
	Colour       bool // false: NO_COLOR / --no-color / not a colour terminal
}

// EventsMsg carries session events in seq order; the model drops seq <= its last.
type EventsMsg []api.SessionEvent

// HistoryDoneMsg says the stored history is replayed; live events follow.
type HistoryDoneMsg struct{}

// ConnState is the connection's state for the status line.
type ConnState int

// The connection states.
const (
	ConnLoading ConnState = iota
	ConnLive
	ConnReconnecting
	ConnClosed
)

func (s ConnState) String() string {
	return [...]string{"loading", "live", "reconnecting", "closed"}[s]
}

// ConnMsg is the connection state for the status line.
type ConnMsg struct {
	State ConnState
	Err   error
}

// SessionMsg is a refreshed session.
type SessionMsg api.Session

// SandboxMsg is a sandbox state change.
type SandboxMsg struct{ State string }

// Model is the stand-in chat model.
type Model struct {
	o             Options
	lines         []string
	last          uint64
	conn          ConnMsg
	input         string
	perm          *api.PermissionData
	width, height int
	interrupted   bool
	note          string
}

// New returns a chat model.
func New(o Options) *Model { return &Model{o: o, width: 80, height: 24} }

// LastSeq returns the seq of the last event the model took.
func (m *Model) LastSeq() uint64 { return m.last }

// Init implements tea.Model.
func (m *Model) Init() tea.Cmd { return nil }

type backendDone struct{ err error }

func (m *Model) call(fn func(context.Context) error) tea.Cmd {
	return func() tea.Msg { return backendDone{fn(context.Background())} }
}

// Update implements tea.Model.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case EventsMsg:
		for _, ev := range msg {
			if ev.Seq > m.last {
				m.last = ev.Seq
				m.add(ev)
			}
		}
	case ConnMsg:
		m.conn = msg
	case SessionMsg:
		m.o.Session = api.Session(msg)
	case SandboxMsg:
		m.o.SandboxState = msg.State
	case backendDone:
		if msg.err != nil {
			m.note = msg.err.Error()
		}
	case tea.KeyPressMsg:
		return m, m.key(msg)
	}
	return m, nil
}

func (m *Model) key(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case "ctrl+d":
		return tea.Quit
	case "ctrl+c":
		if m.interrupted || m.o.Session.State == api.SessionIdle {
			return tea.Quit
		}
		m.interrupted = true
		return m.call(m.o.Backend.Cancel)
	}
	m.interrupted = false
	if m.perm != nil {
		kinds := map[string]string{"y": api.OptionAllowOnce, "a": api.OptionAllowAlways, "n": api.OptionRejectOnce}
		if len(m.perm.Options) > 0 {
			kinds["enter"] = m.perm.Options[0].Kind
		}
		if kind, ok := kinds[k.String()]; ok {
			id := m.perm.ToolCallID
			return m.call(func(ctx context.Context) error { return m.o.Backend.Answer(ctx, id, kind) })
		}
		return nil
	}
	switch k.String() {
	case "enter":
		text := m.input
		m.input = ""
		if strings.TrimSpace(text) == "" {
			return nil
		}
		return m.call(func(ctx context.Context) error { return m.o.Backend.Prompt(ctx, text) })
	case "backspace":
		if m.input != "" {
			m.input = m.input[:len(m.input)-1]
		}
	default:
		m.input += k.Text
	}
	return nil
}

func (m *Model) add(ev api.SessionEvent) {
	switch ev.Type {
	case api.EventPrompt:
		var d api.PromptPost
		_ = json.Unmarshal(ev.Data, &d)
		m.lines = append(m.lines, "> "+d.Text)
		m.o.Session.State = api.SessionRunning
	case api.EventUpdate:
		var u struct {
			SessionUpdate string `json:"sessionUpdate"`
			Content       struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		_ = json.Unmarshal(ev.Data, &u)
		if u.SessionUpdate == "agent_message_chunk" {
			m.lines = append(m.lines, strings.Split(u.Content.Text, "\n")...)
		} else {
			m.lines = append(m.lines, "["+u.SessionUpdate+"]")
		}
	case api.EventPermission:
		var d api.PermissionData
		_ = json.Unmarshal(ev.Data, &d)
		m.perm = &d
		m.lines = append(m.lines, "permission: "+d.Title+" (y allow once, a allow always, n reject)")
	case api.EventPermissionResolved:
		var d api.PermissionDecision
		_ = json.Unmarshal(ev.Data, &d)
		m.perm = nil
		m.lines = append(m.lines, fmt.Sprintf("resolved: %s %s by %s %s", d.Outcome, d.Kind, d.By, d.Operator))
	case api.EventTurnEnd:
		var d api.TurnEndData
		_ = json.Unmarshal(ev.Data, &d)
		m.lines = append(m.lines, "turn ended: "+string(d.StopReason))
		m.o.Session.State = api.SessionIdle
		m.perm = nil
	default:
		m.lines = append(m.lines, string(ev.Type)+": "+string(ev.Data))
	}
}

// View implements tea.Model.
func (m *Model) View() tea.View {
	body := max(m.height-2, 1)
	lines := m.lines[max(len(m.lines)-body, 0):]
	var b strings.Builder
	for range body - len(lines) {
		b.WriteString("\n")
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "%s (%s) · %s · %s · %s · %s %s\n> %s", m.o.Sandbox, m.o.SandboxState, m.o.Session.Harness,
		m.o.Session.ID, m.o.Session.State, m.conn.State, m.note, m.input)
	v := tea.NewView(b.String())
	v.AltScreen = true
	return v
}
