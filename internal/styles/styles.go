// Package styles owns how hiloop colours what it prints: one palette and the named styles built
// from it, for the CLI's tables, errors and progress and for the chat TUI. It decides nothing
// about terminals or the environment; internal/iostreams says whether colour is on and asks for
// New(true) or New(false).
//
// The palette is ANSI's sixteen colours, so the user's terminal theme chooses the shades and
// every colour terminal shows them. Colour never carries meaning alone: what a style marks is
// also in the text.
package styles

import (
	"image/color"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/hiloop/hiloop/pkg/api"
)

// The palette: every colour hiloop uses.
var (
	ColorSuccess color.Color = lipgloss.Green
	ColorError   color.Color = lipgloss.Red
	ColorWarning color.Color = lipgloss.Yellow
	ColorNotice  color.Color = lipgloss.Cyan
	ColorAccent  color.Color = lipgloss.Blue
	ColorMuted   color.Color = lipgloss.BrightBlack
)

// Styles are the named styles; with colour off every one renders its text unchanged, without
// escapes.
type Styles struct {
	// Colour says whether these styles colour anything.
	Colour bool

	// Success marks what went as asked ("running", "ready").
	Success lipgloss.Style
	// Error marks failures, such as the "hiloop:" prefix of an error.
	Error lipgloss.Style
	// Warning marks what needs attention or is under way.
	Warning lipgloss.Style
	// Notice marks information from the daemon or a harness the user should see.
	Notice lipgloss.Style
	// Dim is secondary text: hints, stopped things, timings.
	Dim lipgloss.Style
	// Bold is emphasis without colour.
	Bold lipgloss.Style
	// Accent marks the one thing on a line the eye should find: a name, a key.
	Accent lipgloss.Style
	// TableHeader is the header row of a list.
	TableHeader lipgloss.Style

	// ProgressFull and ProgressEmpty colour a progress bar's filled and empty parts (nil: none).
	ProgressFull, ProgressEmpty color.Color
}

// New returns the styles, coloured or plain.
func New(colour bool) *Styles {
	if !colour {
		plain := lipgloss.NewStyle()
		return &Styles{
			Success: plain, Error: plain, Warning: plain, Notice: plain, Dim: plain, Bold: plain,
			Accent: plain, TableHeader: plain,
		}
	}
	fg := func(c color.Color) lipgloss.Style { return lipgloss.NewStyle().Foreground(c) }
	return &Styles{
		Colour:      true,
		Success:     fg(ColorSuccess),
		Error:       fg(ColorError).Bold(true),
		Warning:     fg(ColorWarning),
		Notice:      fg(ColorNotice),
		Dim:         lipgloss.NewStyle().Faint(true),
		Bold:        lipgloss.NewStyle().Bold(true),
		Accent:      fg(ColorAccent).Bold(true),
		TableHeader: lipgloss.NewStyle().Bold(true).Underline(true),

		ProgressFull:  ColorAccent,
		ProgressEmpty: ColorMuted,
	}
}

// outcome is what a state or status says about the thing it describes, and so how it is styled.
type outcome int

const (
	outcomeNone    outcome = iota // unknown: left plain
	outcomeGood                   // up and usable
	outcomeBusy                   // under way
	outcomeResting                // stopped or not there yet, by choice
	outcomeBad                    // failed
)

// outcomes maps the states the daemon reports (sandboxes, snapshots, sessions), the statuses the
// CLI shows (images, logins) and ACP's tool call and plan entry statuses to their outcome.
var outcomes = map[string]outcome{
	string(api.StateRunning):  outcomeGood,
	string(api.StateCreating): outcomeBusy,
	string(api.StateStarting): outcomeBusy,
	string(api.StateStopping): outcomeBusy,
	string(api.StateDeleting): outcomeBusy,
	string(api.StateStopped):  outcomeResting,
	string(api.StateFailed):   outcomeBad,

	string(api.SnapshotReady):   outcomeGood,
	string(api.SnapshotSealing): outcomeBusy,

	// A session's "running" is the sandbox's word.
	string(api.SessionIdle):    outcomeResting,
	string(api.SessionWaiting): outcomeBusy,

	"built":                         outcomeGood,
	"not built":                     outcomeResting,
	string(api.LoginOK):             outcomeGood,
	string(api.LoginNeedsReconnect): outcomeBad,

	// ACP tool call and plan entry statuses.
	"pending":     outcomeResting,
	"in_progress": outcomeBusy,
	"completed":   outcomeGood, // "failed" is the sandbox state's
}

// State is the style of a state or status word: running and ready in green, under way in
// yellow, stopped faint, failed in red; an unknown word stays plain.
func (s *Styles) State(state string) lipgloss.Style {
	switch outcomes[state] {
	case outcomeGood:
		return s.Success
	case outcomeBusy:
		return s.Warning
	case outcomeResting:
		return s.Dim
	case outcomeBad:
		return s.Error
	}
	return lipgloss.NewStyle()
}

// RenderText renders text that must come out as it went in, such as an agent's output streamed
// to a terminal a chunk at a time: line by line, tabs kept, no line padded to the width of the
// widest, newlines where they were. Style.Render lays out a block, which is for the TUI.
func RenderText(st lipgloss.Style, s string) string {
	st = st.TabWidth(lipgloss.NoTabConversion)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = st.Render(l)
		}
	}
	return strings.Join(lines, "\n")
}

// StandAlone makes each of lines, wrapped from one styled text, stand alone on a screen:
// wrapping may break a style's span (a word longer than a line), so a line that leaves a style
// open closes it, and the next line opens it again.
func StandAlone(lines []string) []string {
	open := ""
	for i, l := range lines {
		l, open = open+l, ""
		if sgr := lastSGR(l); sgr != "" && sgr != ansi.ResetStyle && sgr != csi+"0m" {
			open, l = sgr, l+ansi.ResetStyle
		}
		lines[i] = l
	}
	return lines
}

// csi starts a control sequence.
const csi = string(rune(ansi.ESC)) + "["

// lastSGR is the last select-graphic-rendition sequence in l, or "".
func lastSGR(l string) string {
	for j := len(l); j > 0; {
		j = strings.LastIndex(l[:j], csi)
		if j < 0 {
			break
		}
		k := strings.IndexFunc(l[j+len(csi):], func(r rune) bool { return (r < '0' || r > '9') && r != ';' })
		if k >= 0 && l[j+len(csi)+k] == 'm' {
			return l[j : j+len(csi)+k+1]
		}
	}
	return ""
}
