package chat

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textarea"
	tea "charm.land/bubbletea/v2"

	"github.com/hiloop/hiloop/internal/styles"
	"github.com/hiloop/hiloop/internal/tui"
	"github.com/hiloop/hiloop/pkg/api"
)

// Backend does what the user asks of the session. Each call returns when the daemon answered;
// the model runs them in tea.Cmds, never in Update.
type Backend interface {
	// Prompt starts a turn with text.
	Prompt(ctx context.Context, text string) error
	// Cancel cancels the running turn.
	Cancel(ctx context.Context) error
	// Answer answers the permission request of toolCallID with the option of kind optionKind
	// (api.OptionAllowOnce, ...).
	Answer(ctx context.Context, toolCallID, optionKind string) error
}

// Options configure a chat.
type Options struct {
	Sandbox      string      // the sandbox's name
	SandboxState string      // its state when the chat opened
	Session      api.Session // the session as the daemon reported it
	Backend      Backend
	Colour       bool // false: NO_COLOR / --no-color / not a colour terminal
}

// ConnState is the state of the driver's connection to the session's event stream.
type ConnState int

// The connection states, shown in the status line.
const (
	ConnLoading      ConnState = iota // replaying the stored history
	ConnLive                          // following live events
	ConnReconnecting                  // the stream dropped; the driver is reconnecting
	ConnClosed                        // the stream ended for good (the session was deleted, ...)
)

func (s ConnState) String() string {
	switch s {
	case ConnLoading:
		return "loading history"
	case ConnLive:
		return "live"
	case ConnReconnecting:
		return "reconnecting…"
	case ConnClosed:
		return "disconnected"
	}
	return fmt.Sprintf("ConnState(%d)", int(s))
}

// EventsMsg carries session events in seq order. The model drops those with seq <= LastSeq, so
// history pages and live events, and events sent again after a reconnect, can be sent alike.
type EventsMsg []api.SessionEvent

// HistoryDoneMsg says the stored history is replayed; live events follow.
type HistoryDoneMsg struct{}

// ConnMsg is the connection state for the status line.
type ConnMsg struct {
	State ConnState
	Err   error // why, when reconnecting or closed
}

// SessionMsg is the session as the daemon reports it now (state, model usage and budget).
type SessionMsg api.Session

// SandboxMsg is a change of the sandbox's state: an api.SandboxState such as "starting" or
// "running", or SandboxDeleted.
type SandboxMsg struct {
	State string
	Err   error // why a change asked for did not happen (a start that failed), shown as a note
}

// SandboxDeleted is the state of a sandbox that is gone.
const SandboxDeleted = "deleted"

// Internal messages.
type (
	// backendDoneMsg is the result of a Backend call.
	backendDoneMsg struct {
		op   string // "prompt", "cancel" or "answer"
		text string // the prompt's text, the answer's tool call id
		err  error
	}
	noteExpiredMsg struct{ id int }
	spinMsg        struct{}
	frameMsg       struct{} // time to draw what events changed since the last frame
)

// quitWindow is how soon a second Ctrl-C must follow the first to quit.
const quitWindow = 2 * time.Second

// historyFrame is how often the screen is redrawn while the stored history loads.
const historyFrame = 250 * time.Millisecond

// noteTTL is how long a transient note stays.
const noteTTL = 5 * time.Second

// backendTimeout bounds one Backend call: they are requests the daemon answers at once.
const backendTimeout = 30 * time.Second

var spinFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// Model is the bubbletea model of one chat on one session.
type Model struct {
	opts         Options
	st           styles.Chat
	quitter      *tui.Quitter
	r            renderer
	t            transcript
	lastSeq      uint64
	session      api.Session
	sandboxState string
	conn         ConnMsg
	historyDone  bool

	width, height  int
	input          textarea.Model
	inputCache     []string
	inputCacheKey  inputKey
	ruleCache      string
	ruleCacheWidth int

	// Scrolling: the window shows the last lines while follow is set, else starts at top.
	follow bool
	top    linePos
	unseen bool // something changed below the window since the user scrolled up

	histIdx int    // index into t.prompts while walking the history, -1 at the draft
	draft   string // what was typed before walking the history

	permFor    string            // the tool call id the permission cursor belongs to
	permCursor int               // the option under the cursor
	answering  map[string]string // tool call id → option kind sent, until its decision arrives

	sending    bool // a Prompt call is in flight
	cancelling bool // a Cancel was asked and the turn has not ended yet
	lastCtrlC  time.Time
	help       bool
	note       string
	noteID     int
	spin       int
	spinning   bool

	// Streamed events redraw at most once a frame: bubbletea calls View after every Update, and
	// a turn can send thousands of chunks a second. Keys and resizes redraw at once.
	frame     time.Duration
	lastView  time.Time
	deferred  bool // the screen is behind the events until the next frameMsg
	frameTick bool // a frameMsg is on its way
	viewCache tea.View
	viewValid bool

	now   func() time.Time
	after func(time.Duration, func(time.Time) tea.Msg) tea.Cmd // tea.Tick; tests stop the clock
}

// New returns the model of a chat on o.Session. It implements tea.Model.
func New(o Options) *Model {
	m := &Model{
		opts:         o,
		st:           styles.NewChat(o.Colour),
		quitter:      tui.NewQuitter(),
		t:            newTranscript(),
		session:      o.Session,
		sandboxState: o.SandboxState,
		conn:         ConnMsg{State: ConnLoading},
		follow:       true,
		answering:    map[string]string{},
		histIdx:      -1,
		now:          time.Now,
		frame:        time.Second / 60,
		after:        tea.Tick,
	}
	m.r.st = m.st
	m.input = newInput(m.st)
	return m
}

func newInput(st styles.Chat) textarea.Model {
	in := textarea.New()
	in.Prompt = "› "
	in.Placeholder = "Type a prompt · ? for keys"
	in.ShowLineNumbers = false
	in.CharLimit = 0
	// No MaxHeight: the textarea sizes its wrap cache by it, and a cache of a few lines makes
	// every key in a large paste rewrap all of it. fitInput sets the height instead.
	in.MaxHeight = 0
	in.SetVirtualCursor(false)
	km := textarea.DefaultKeyMap()
	km.InsertNewline = key.NewBinding(key.WithKeys("alt+enter", "ctrl+j", "shift+enter"))
	km.DeleteCharacterForward = key.NewBinding(key.WithKeys("delete")) // ctrl+d quits
	km.InputBegin = key.NewBinding(key.WithKeys("alt+<"))              // ctrl+home scrolls
	km.InputEnd = key.NewBinding(key.WithKeys("alt+>"))                // ctrl+end scrolls
	km.LinePrevious = key.NewBinding(key.WithKeys("up"))
	km.LineNext = key.NewBinding(key.WithKeys("down"))
	km.PageUp = key.NewBinding(key.WithDisabled())   // pgup scrolls the transcript
	km.PageDown = key.NewBinding(key.WithDisabled()) // pgdown too
	in.KeyMap = km
	s := textarea.DefaultDarkStyles()
	plain := st.Message
	for _, ss := range []*textarea.StyleState{&s.Focused, &s.Blurred} {
		ss.Base, ss.Text, ss.CursorLine, ss.EndOfBuffer = plain, plain, plain, plain
		ss.LineNumber, ss.CursorLineNumber = plain, plain
		ss.Placeholder, ss.Prompt = st.Muted, st.PromptMark
	}
	in.SetStyles(s)
	in.Focus()
	return in
}

// LastSeq is the seq of the last event the model has applied: where a reconnecting stream
// resumes.
func (m *Model) LastSeq() uint64 { return m.lastSeq }

// Init implements tea.Model.
func (m *Model) Init() tea.Cmd { return nil }

// Update implements tea.Model.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmds []tea.Cmd
	if _, ok := msg.(EventsMsg); !ok {
		m.deferred = false
	}
	switch msg := msg.(type) {
	case frameMsg:
		m.frameTick = false
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.input.SetWidth(max(1, m.width))
	case EventsMsg:
		m.applyEvents(msg)
		every := m.frame
		if !m.historyDone {
			// The screen shows where the history has got to, not each page of it: drawing
			// the bottom of a half-loaded transcript ten times was a tenth of opening one.
			every = historyFrame
		}
		if m.frame > 0 && m.viewValid && m.now().Sub(m.lastView) < every {
			m.deferred = true
			if !m.frameTick {
				m.frameTick = true
				cmds = append(cmds, m.after(every, func(time.Time) tea.Msg { return frameMsg{} }))
			}
		}
	case HistoryDoneMsg:
		m.historyDone = true
	case ConnMsg:
		m.conn = msg
	case SessionMsg:
		m.session = api.Session(msg)
	case SandboxMsg:
		gone := msg.State == SandboxDeleted && m.sandboxState != SandboxDeleted
		m.sandboxState = msg.State
		switch {
		case msg.Err != nil:
			cmds = append(cmds, m.setNote("sandbox did not start: "+errText(msg.Err)))
		case gone:
			cmds = append(cmds, m.setNote("sandbox "+firstNonEmpty(m.opts.Sandbox, m.session.Sandbox)+" is gone: it was deleted"))
		}
	case backendDoneMsg:
		cmds = append(cmds, m.backendDone(msg))
	case noteExpiredMsg:
		if msg.id == m.noteID {
			m.note = ""
		}
	case spinMsg:
		m.spinning = false
		if m.turnRunning() {
			m.spin = (m.spin + 1) % len(spinFrames)
		}
	case tea.MouseWheelMsg:
		switch msg.Button {
		case tea.MouseWheelUp:
			m.scrollBy(-3)
		case tea.MouseWheelDown:
			m.scrollBy(3)
		}
	case tea.PasteMsg:
		if m.permissionOpen() == nil {
			m.help = false
			var cmd tea.Cmd
			m.input, cmd = m.input.Update(msg)
			cmds = append(cmds, cmd)
		}
	case tea.KeyPressMsg:
		cmds = append(cmds, m.key(msg))
	default:
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		cmds = append(cmds, cmd)
	}
	m.fitInput()
	if m.turnRunning() && !m.spinning {
		m.spinning = true
		cmds = append(cmds, m.after(100*time.Millisecond, func(time.Time) tea.Msg { return spinMsg{} }))
	}
	return m, tea.Batch(cmds...)
}

// maxInputLines is the most lines the input grows to; past it, it scrolls.
const maxInputLines = 8

// fitInput grows the input with its text, up to maxInputLines (a third of a short screen).
func (m *Model) fitInput() {
	n := m.input.LineCount()
	if n == 1 {
		n = m.input.LineInfo().Height // one long line, wrapped
	}
	limit := min(maxInputLines, max(1, m.height/3))
	if h := min(limit, max(1, n)); h != m.input.Height() {
		m.input.SetHeight(h)
	}
}

func (m *Model) applyEvents(evs EventsMsg) {
	changed := false
	for _, ev := range evs {
		if ev.Seq <= m.lastSeq {
			continue // already shown: a history page and the live stream overlap, or a reconnect
		}
		m.lastSeq = ev.Seq
		if m.t.apply(ev) {
			changed = true
		}
		if ev.Type == api.EventTurnEnd {
			if m.cancelling {
				m.note = "" // "cancelling…" is done
			}
			m.cancelling = false
		}
	}
	if changed && !m.follow {
		m.unseen = true
	}
}

// turnRunning says whether a turn runs (or is about to, or waits for a permission answer).
func (m *Model) turnRunning() bool {
	return m.t.running || m.sending || len(m.t.pending) > 0
}

// setNote shows a transient note above the input.
func (m *Model) setNote(s string) tea.Cmd {
	m.note = s
	m.noteID++
	id := m.noteID
	return m.after(noteTTL, func(time.Time) tea.Msg { return noteExpiredMsg{id} })
}

// call runs a Backend call in a tea.Cmd.
func (m *Model) call(op, text string, f func(ctx context.Context) error) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), backendTimeout)
		defer cancel()
		return backendDoneMsg{op: op, text: text, err: f(ctx)}
	}
}

func (m *Model) backendDone(msg backendDoneMsg) tea.Cmd {
	switch msg.op {
	case "prompt":
		m.sending = false
		if msg.err != nil {
			if m.input.Value() == "" {
				m.input.SetValue(msg.text) // keep what was typed
			}
			return m.setNote("not sent: " + errText(msg.err))
		}
	case "cancel":
		if msg.err != nil {
			m.cancelling = false
			return m.setNote("cancel failed: " + errText(msg.err))
		}
	case "answer":
		if msg.err != nil {
			delete(m.answering, msg.text)
			return m.setNote("answer failed: " + errText(msg.err))
		}
	}
	return nil
}

func errText(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// quit ends the program; a turn that runs goes on in the daemon.
func (m *Model) quit() tea.Cmd { return m.quitter.Quit() }

// Quitter says when the user quit, for tui.Run.
func (m *Model) Quitter() *tui.Quitter { return m.quitter }
