package chat

import (
	"context"
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/hiloop/hiloop/pkg/api"
)

// shortcuts maps the one-key answers of a permission prompt to option kinds.
var shortcuts = map[string]string{
	"y": api.OptionAllowOnce,
	"a": api.OptionAllowOnce,
	"A": api.OptionAllowAlways,
	"n": api.OptionRejectOnce,
	"N": api.OptionRejectAlways,
}

// optionKinds are the permission option kinds: the key shown next to each in the prompt, and
// how a decision of that kind reads in the transcript.
var optionKinds = []struct{ kind, key, verb string }{
	{api.OptionAllowOnce, "y", "allowed once"},
	{api.OptionAllowAlways, "A", "allowed always"},
	{api.OptionRejectOnce, "n", "rejected once"},
	{api.OptionRejectAlways, "N", "rejected always"},
}

// shortcutOf is the key shown next to an option of kind.
func shortcutOf(kind string) string {
	for _, k := range optionKinds {
		if k.kind == kind {
			return k.key
		}
	}
	return ""
}

// key handles a key press: the keys that work everywhere first, then the permission prompt's
// when one is open, else the input's.
func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	k := msg.String()
	switch k {
	case "ctrl+c":
		return m.interrupt()
	case "ctrl+d":
		return m.quit()
	case "pgup":
		m.scrollBy(-m.pageSize())
		return nil
	case "pgdown":
		m.scrollBy(m.pageSize())
		return nil
	case "ctrl+home":
		m.scrollTop()
		return nil
	case "ctrl+end":
		m.scrollBottom()
		return nil
	case "ctrl+o":
		m.toggleExpand()
		return nil
	}
	if m.help {
		m.help = false
		if k == "?" || k == "esc" || k == "q" {
			return nil
		}
	}
	if p := m.permissionOpen(); p != nil {
		return m.permissionKey(p, k)
	}
	empty := m.input.Value() == ""
	switch k {
	case "enter":
		return m.send()
	case "?":
		if empty {
			m.help = true
			return nil
		}
	case "home", "end":
		if empty {
			if k == "home" {
				m.scrollTop()
			} else {
				m.scrollBottom()
			}
			return nil
		}
	case "up":
		if m.input.Line() == 0 && m.input.LineInfo().RowOffset == 0 && m.historyWalk(-1) {
			return nil
		}
	case "down":
		li := m.input.LineInfo()
		if m.input.Line() == m.input.LineCount()-1 && li.RowOffset >= li.Height-1 && m.historyWalk(1) {
			return nil
		}
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return cmd
}

// interrupt is Ctrl-C: it cancels a running turn; a second one within quitWindow quits, and so
// does one while idle with nothing typed. While idle with something typed it clears the input.
func (m *Model) interrupt() tea.Cmd {
	now := m.now()
	if !m.lastCtrlC.IsZero() && now.Sub(m.lastCtrlC) < quitWindow {
		return m.quit()
	}
	m.lastCtrlC = now
	switch {
	case m.turnRunning():
		if m.cancelling {
			return m.setNote("cancelling… ctrl+c again to quit")
		}
		m.cancelling = true
		b := m.opts.Backend
		return tea.Batch(m.setNote("cancelling… ctrl+c again to quit"),
			m.call("cancel", "", func(ctx context.Context) error { return b.Cancel(ctx) }))
	case m.input.Value() == "":
		return m.quit()
	}
	m.input.Reset()
	m.histIdx = -1
	return m.setNote("input cleared · ctrl+c again to quit")
}

// send sends the input as a prompt. A prompt typed while a turn runs is refused with a note and
// stays in the input: the daemon runs one turn at a time, and a queued prompt would run on a
// conversation its author has not read yet.
func (m *Model) send() tea.Cmd {
	text := m.input.Value()
	if strings.TrimSpace(text) == "" {
		return nil
	}
	if m.turnRunning() {
		return m.setNote("a turn is running: wait for it, or ctrl+c to cancel it")
	}
	if len(text) > api.MaxPromptBytes {
		return m.setNote(fmt.Sprintf("too long: %d KiB, a prompt holds at most %d KiB", len(text)>>10, api.MaxPromptBytes>>10))
	}
	m.input.Reset()
	m.sending = true
	m.histIdx = -1
	m.draft = ""
	m.scrollBottom()
	b := m.opts.Backend
	return m.call("prompt", text, func(ctx context.Context) error { return b.Prompt(ctx, text) })
}

// historyWalk moves through earlier prompts (dir -1 older, +1 newer); past the newest it brings
// back what was being typed. It reports whether it moved.
func (m *Model) historyWalk(dir int) bool {
	n := len(m.t.prompts)
	cur := m.histIdx
	if cur < 0 || cur > n {
		cur = n
	}
	next := cur + dir
	if next < 0 || next > n {
		return false
	}
	if cur == n {
		m.draft = m.input.Value()
	}
	if next == n {
		m.histIdx = -1
		m.input.SetValue(m.draft)
	} else {
		m.histIdx = next
		m.input.SetValue(m.t.prompts[next])
	}
	if dir < 0 {
		m.input.MoveToBegin()
	} else {
		m.input.MoveToEnd()
	}
	return true
}

// permissionOpen is the permission request the prompt shows: the oldest one nobody answered.
func (m *Model) permissionOpen() *permission {
	if len(m.t.pending) == 0 {
		return nil
	}
	e := m.t.perms[m.t.pending[0]]
	if e == nil {
		return nil
	}
	if m.permFor != e.perm.id {
		m.permFor, m.permCursor = e.perm.id, 0
	}
	return e.perm
}

func (m *Model) permissionKey(p *permission, k string) tea.Cmd {
	switch k {
	case "up", "k", "shift+tab":
		m.permCursor = max(0, m.permCursor-1)
		return nil
	case "down", "j", "tab":
		m.permCursor = min(len(p.options)-1, m.permCursor+1)
		return nil
	case "enter":
		if m.permCursor < len(p.options) {
			return m.answer(p, p.options[m.permCursor].Kind)
		}
		return nil
	}
	kind, ok := shortcuts[k]
	if !ok {
		return nil
	}
	for i, o := range p.options {
		if o.Kind == kind {
			m.permCursor = i
			return m.answer(p, kind)
		}
	}
	return m.setNote("this request offers no " + strings.ReplaceAll(kind, "_", " ") + " option")
}

func (m *Model) answer(p *permission, kind string) tea.Cmd {
	if m.answering[p.id] != "" {
		return nil // sent; the prompt closes when the decision arrives
	}
	m.answering[p.id] = kind
	b, id := m.opts.Backend, p.id
	return m.call("answer", id, func(ctx context.Context) error { return b.Answer(ctx, id, kind) })
}

// toggleExpand expands or collapses the last tool call or thought shown in the window, or the
// last one of the transcript when the window shows none.
func (m *Model) toggleExpand() {
	first, last := m.visibleRange()
	i := lastExpandable(m.t.entries, first, last)
	if i < 0 {
		i = lastExpandable(m.t.entries, 0, len(m.t.entries)-1)
	}
	if i >= 0 {
		m.t.entries[i].expanded = !m.t.entries[i].expanded
	}
}

func lastExpandable(entries []*entry, first, last int) int {
	for i := min(last, len(entries)-1); i >= max(first, 0); i-- {
		if entries[i].expandable() {
			return i
		}
	}
	return -1
}
