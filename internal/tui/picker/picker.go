// Package picker is the session picker `hiloop chat` shows when it is not told which session to
// open: a sandbox's sessions, newest activity first, and a "new session" row. It only chooses;
// the caller lists the sessions and opens the one chosen.
package picker

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/hiloop/hiloop/internal/tui"
)

// Item is one session the picker offers, its cells formatted by the caller.
type Item struct {
	ID           string // the session id, e.g. "k3x9q2m7v4b8"
	Harness      string // e.g. "claude-code"
	LastActivity string // e.g. "3m ago"
	FirstPrompt  string // the session's first prompt on one line, "" for none yet
}

// Choice is what the user picked.
type Choice struct {
	// Session is the chosen session's id; empty with New or Quit.
	Session string
	// New asks for a new session.
	New bool
	// Quit says the user left without choosing.
	Quit bool
}

// Model is the picker: rows 0..len(items)-1 are the sessions, the last row is "new session".
type Model struct {
	sandbox       string
	items         []Item
	cursor        int
	width, height int
	choice        Choice
	quitter       *tui.Quitter
}

// New returns a picker over items, in the order given, for the sessions of sandbox.
func New(sandbox string, items []Item) *Model {
	return &Model{sandbox: sandbox, items: items, width: 80, height: 24, choice: Choice{Quit: true}, quitter: tui.NewQuitter()}
}

// Quitter says when the picker quit, for tui.Run.
func (m *Model) Quitter() *tui.Quitter { return m.quitter }

// Choice returns what the user picked once the program ended; Quit until then.
func (m *Model) Choice() Choice { return m.choice }

// Init implements tea.Model.
func (m *Model) Init() tea.Cmd { return nil }

// Update implements tea.Model.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyPressMsg:
		rows := len(m.items) + 1
		switch msg.String() {
		case "up", "k", "ctrl+p", "shift+tab":
			m.cursor = (m.cursor + rows - 1) % rows
		case "down", "j", "ctrl+n", "tab":
			m.cursor = (m.cursor + 1) % rows
		case "home", "g":
			m.cursor = 0
		case "end", "G":
			m.cursor = rows - 1
		case "n":
			m.cursor = rows - 1
			m.choice = Choice{New: true}
			return m, m.quitter.Quit()
		case "enter":
			if m.cursor == len(m.items) {
				m.choice = Choice{New: true}
			} else {
				m.choice = Choice{Session: m.items[m.cursor].ID}
			}
			return m, m.quitter.Quit()
		case "q", "esc", "ctrl+c", "ctrl+d":
			m.choice = Choice{Quit: true}
			return m, m.quitter.Quit()
		}
	}
	return m, nil
}

// View implements tea.Model. Rows that do not fit scroll with the cursor; every line is cut to
// the width.
func (m *Model) View() tea.View {
	var b strings.Builder
	line := func(s string) { b.WriteString(ansi.Truncate(s, m.width, "…") + "\n") }
	line(fmt.Sprintf("Sessions of sandbox %s", m.sandbox))
	line("")
	idW, harnessW, ageW := len("SESSION"), len("HARNESS"), len("ACTIVE")
	for _, it := range m.items {
		idW, harnessW, ageW = max(idW, len(it.ID)), max(harnessW, len(it.Harness)), max(ageW, len(it.LastActivity))
	}
	format := fmt.Sprintf("%%s %%-%ds  %%-%ds  %%-%ds  %%s", idW, harnessW, ageW)
	line(fmt.Sprintf(format, " ", "SESSION", "HARNESS", "ACTIVE", "FIRST PROMPT"))
	const chrome = 5 // title, blank, header, blank, help
	visible := max(m.height-chrome, 1)
	rows := len(m.items) + 1
	first := min(max(m.cursor-visible+1, 0), max(rows-visible, 0))
	for i := first; i < min(first+visible, rows); i++ {
		mark := " "
		if i == m.cursor {
			mark = ">"
		}
		if i == len(m.items) {
			line(mark + " + new session")
			continue
		}
		it := m.items[i]
		prompt := it.FirstPrompt
		if prompt == "" {
			prompt = "(no prompt yet)"
		}
		line(fmt.Sprintf(format, mark, it.ID, it.Harness, it.LastActivity, prompt))
	}
	line("")
	b.WriteString(ansi.Truncate("↑/↓ move · enter open · n new session · q quit", m.width, "…"))
	return tea.NewView(b.String())
}
