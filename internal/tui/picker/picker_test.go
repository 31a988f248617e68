package picker

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
)

var items = []Item{
	{ID: "aaa111", Harness: "fake", LastActivity: "2m ago", FirstPrompt: "fix the tests"},
	{ID: "bbb222", Harness: "claude-code", LastActivity: "3d ago"},
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		var msg tea.KeyPressMsg
		switch k {
		case "up":
			msg = tea.KeyPressMsg{Code: tea.KeyUp}
		case "down":
			msg = tea.KeyPressMsg{Code: tea.KeyDown}
		case "enter":
			msg = tea.KeyPressMsg{Code: tea.KeyEnter}
		case "esc":
			msg = tea.KeyPressMsg{Code: tea.KeyEscape}
		case "ctrl+c":
			msg = tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
		default:
			msg = tea.KeyPressMsg{Code: rune(k[0]), Text: k}
		}
		_, cmd = m.Update(msg)
	}
	return cmd
}

func TestPickerChoices(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want Choice
	}{
		{[]string{"enter"}, Choice{Session: "aaa111"}},
		{[]string{"down", "enter"}, Choice{Session: "bbb222"}},
		{[]string{"down", "down", "enter"}, Choice{New: true}},
		{[]string{"up", "enter"}, Choice{New: true}}, // wraps to the last row
		{[]string{"down", "down", "down", "enter"}, Choice{Session: "aaa111"}},
		{[]string{"n"}, Choice{New: true}},
		{[]string{"down", "q"}, Choice{Quit: true}},
		{[]string{"esc"}, Choice{Quit: true}},
		{[]string{"ctrl+c"}, Choice{Quit: true}},
	} {
		m := New("web", items)
		cmd := press(m, tc.keys...)
		if got := m.Choice(); got != tc.want {
			t.Errorf("%v: choice %+v, want %+v", tc.keys, got, tc.want)
		}
		if cmd == nil {
			t.Errorf("%v: the picker did not quit", tc.keys)
		} else if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%v: the last key's command is not tea.Quit", tc.keys)
		}
	}
}

func TestPickerView(t *testing.T) {
	m := New("web", items)
	m.Update(tea.WindowSizeMsg{Width: 60, Height: 10})
	press(m, "down")
	got := m.View().Content
	want := strings.Join([]string{
		"Sessions of sandbox web",
		"",
		"  SESSION  HARNESS      ACTIVE  FIRST PROMPT",
		"  aaa111   fake         2m ago  fix the tests",
		"> bbb222   claude-code  3d ago  (no prompt yet)",
		"  + new session",
		"",
		"↑/↓ move · enter open · n new session · q quit",
	}, "\n")
	if got != want {
		t.Errorf("view:\n%s\nwant:\n%s", got, want)
	}
	// A narrow, short terminal: lines are cut, and the rows scroll to keep the cursor in view.
	m.Update(tea.WindowSizeMsg{Width: 20, Height: 6})
	press(m, "down")
	got = m.View().Content
	want = strings.Join([]string{
		"Sessions of sandbox…",
		"",
		"  SESSION  HARNESS …",
		"> + new session",
		"",
		"↑/↓ move · enter op…",
	}, "\n")
	if got != want {
		t.Errorf("narrow view:\n%s\nwant:\n%s", got, want)
	}
}
