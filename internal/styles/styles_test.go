package styles

import (
	"reflect"
	"strings"
	"testing"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/hiloop/hiloop/pkg/api"
)

// plainEverywhere fails the test for each lipgloss.Style field of v that renders with escapes,
// and returns how many it checked.
func plainEverywhere(t *testing.T, what string, v reflect.Value) int {
	t.Helper()
	styled := 0
	for i := range v.NumField() {
		st, ok := v.Field(i).Interface().(lipgloss.Style)
		if !ok {
			continue
		}
		styled++
		if got := st.Render("text"); got != "text" {
			t.Errorf("%s.%s renders %q, want %q", what, v.Type().Field(i).Name, got, "text")
		}
	}
	return styled
}

// Without colour no style may add an escape: that output goes to files, pipes and NO_COLOR users.
func TestPlainStylesAddNothing(t *testing.T) {
	s := New(false)
	if n := plainEverywhere(t, "New(false)", reflect.ValueOf(*s)); n < 8 {
		t.Fatalf("found %d styles in Styles; the walk is broken", n)
	}
	if n := plainEverywhere(t, "NewChat(false)", reflect.ValueOf(NewChat(false))); n < 20 {
		t.Fatalf("found %d styles in Chat; the walk is broken", n)
	}
	if got := s.State(string(api.StateFailed)).Render("failed"); got != "failed" {
		t.Errorf("New(false).State(failed) renders %q", got)
	}
	if s.ProgressFull != nil || s.ProgressEmpty != nil {
		t.Error("New(false) colours the progress bar")
	}
}

func TestStateColours(t *testing.T) {
	s := New(true)
	tests := []struct {
		state string
		want  lipgloss.Style
	}{
		{string(api.StateRunning), s.Success},
		{string(api.SnapshotReady), s.Success},
		{string(api.StateStarting), s.Warning},
		{string(api.SnapshotSealing), s.Warning},
		{string(api.StateStopped), s.Dim},
		{string(api.StateFailed), s.Error},
		{string(api.LoginNeedsReconnect), s.Error},
	}
	for _, tt := range tests {
		got := s.State(tt.state).Render(tt.state)
		if want := tt.want.Render(tt.state); got != want || !strings.Contains(got, "\x1b[") {
			t.Errorf("State(%q) renders %q, want %q", tt.state, got, want)
		}
	}
	if got := s.State("something new").Render("x"); got != "x" {
		t.Errorf("an unknown state renders %q, want it plain", got)
	}
}

// Streamed text keeps its tabs, newlines and line lengths, coloured or not.
func TestRenderTextKeepsText(t *testing.T) {
	in := "a\tb\n\nlonger line\n"
	if got := RenderText(New(false).Dim, in); got != in {
		t.Errorf("plain RenderText = %q, want %q", got, in)
	}
	got := RenderText(New(true).Dim, in)
	if !strings.Contains(got, "\x1b[") || ansi.Strip(got) != in {
		t.Errorf("coloured RenderText = %q, want %q with escapes around its lines", got, in)
	}
}

// A style left open at a line's end is closed there and opened again on the next line; a
// reset, or no style at all, is left alone.
func TestStandAlone(t *testing.T) {
	bold, red := "\x1b[1m", "\x1b[31;1m"
	got := StandAlone([]string{"a " + bold + "long", "word" + "\x1b[m b", red + "c", "d", "plain", "e\x1b[0m"})
	want := []string{"a " + bold + "long\x1b[m", bold + "word\x1b[m b", red + "c\x1b[m", red + "d\x1b[m", red + "plain\x1b[m", red + "e\x1b[0m"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("StandAlone =\n%q\nwant\n%q", got, want)
	}
}
