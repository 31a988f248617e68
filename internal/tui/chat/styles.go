package chat

import (
	"image/color"

	"charm.land/lipgloss/v2"
)

// Palette is the handful of colours every style of the chat is built from.
type Palette struct {
	Accent  color.Color // the user's prompts, selection, the focused prompt
	Muted   color.Color // thoughts, context lines, hints, separators
	Subtle  color.Color // the status bar's background
	Text    color.Color // the status bar's text
	Success color.Color // completed tool calls and plan items, added lines, allowed
	Danger  color.Color // errors, failed tool calls, removed lines, rejected
	Warning color.Color // notices, permission requests, "cancelling"
	Info    color.Color // tool call titles, diff hunk headers
}

// DefaultPalette is the chat's palette on a dark or light terminal (ANSI 256 colours, which every
// colour terminal shows and the renderer downsamples further where it must).
func DefaultPalette() Palette {
	return Palette{
		Accent:  lipgloss.Color("141"),
		Muted:   lipgloss.Color("245"),
		Subtle:  lipgloss.Color("236"),
		Text:    lipgloss.Color("252"),
		Success: lipgloss.Color("42"),
		Danger:  lipgloss.Color("203"),
		Warning: lipgloss.Color("214"),
		Info:    lipgloss.Color("75"),
	}
}

// Styles are the chat's lipgloss styles. Built with colour off, every style is empty, so the
// screen carries no escape sequence at all.
type Styles struct {
	Colour bool

	PromptMark lipgloss.Style // the "›" before a prompt
	Prompt     lipgloss.Style // a prompt's text
	Message    lipgloss.Style // agent text that is not markdown-rendered yet (the streaming tail)
	Thought    lipgloss.Style
	ToolTitle  lipgloss.Style
	ToolKind   lipgloss.Style
	ToolOutput lipgloss.Style
	Running    lipgloss.Style // status icons of pending and running tool calls
	Done       lipgloss.Style
	Failed     lipgloss.Style
	DiffAdd    lipgloss.Style
	DiffDel    lipgloss.Style
	DiffHunk   lipgloss.Style
	DiffCtx    lipgloss.Style
	DiffPath   lipgloss.Style
	PlanDone   lipgloss.Style
	PlanActive lipgloss.Style
	PlanTodo   lipgloss.Style
	Notice     lipgloss.Style
	Error      lipgloss.Style
	TurnEnd    lipgloss.Style
	Muted      lipgloss.Style
	Permission lipgloss.Style // the permission prompt's frame and question
	Selected   lipgloss.Style // the option under the cursor
	Key        lipgloss.Style // a key's name in hints and help
	Status     lipgloss.Style // the status bar
	StatusBold lipgloss.Style // the sandbox's name in the status bar
	Note       lipgloss.Style // a transient note above the input
	Rule       lipgloss.Style // the line between transcript and input
}

// NewStyles builds the styles from p; with colour false they are all plain.
func NewStyles(p Palette, colour bool) Styles {
	plain := lipgloss.NewStyle()
	if !colour {
		return Styles{
			PromptMark: plain, Prompt: plain, Message: plain, Thought: plain, ToolTitle: plain,
			ToolKind: plain, ToolOutput: plain, Running: plain, Done: plain, Failed: plain,
			DiffAdd: plain, DiffDel: plain, DiffHunk: plain, DiffCtx: plain, DiffPath: plain,
			PlanDone: plain, PlanActive: plain, PlanTodo: plain, Notice: plain, Error: plain,
			TurnEnd: plain, Muted: plain, Permission: plain, Selected: plain, Key: plain,
			Status: plain, StatusBold: plain, Note: plain, Rule: plain,
		}
	}
	fg := func(c color.Color) lipgloss.Style { return plain.Foreground(c) }
	return Styles{
		Colour:     true,
		PromptMark: fg(p.Accent).Bold(true),
		Prompt:     fg(p.Accent),
		Message:    plain,
		Thought:    fg(p.Muted).Italic(true),
		ToolTitle:  plain.Bold(true),
		ToolKind:   fg(p.Muted),
		ToolOutput: fg(p.Muted),
		Running:    fg(p.Warning),
		Done:       fg(p.Success),
		Failed:     fg(p.Danger),
		DiffAdd:    fg(p.Success),
		DiffDel:    fg(p.Danger),
		DiffHunk:   fg(p.Info),
		DiffCtx:    fg(p.Muted),
		DiffPath:   fg(p.Info).Bold(true),
		PlanDone:   fg(p.Muted).Strikethrough(true),
		PlanActive: plain.Bold(true),
		PlanTodo:   plain,
		Notice:     fg(p.Warning),
		Error:      fg(p.Danger).Bold(true),
		TurnEnd:    fg(p.Muted),
		Muted:      fg(p.Muted),
		Permission: fg(p.Warning).Bold(true),
		Selected:   fg(p.Accent).Bold(true),
		Key:        fg(p.Accent).Bold(true),
		Status:     fg(p.Text).Background(p.Subtle),
		StatusBold: fg(p.Text).Background(p.Subtle).Bold(true),
		Note:       fg(p.Warning),
		Rule:       fg(p.Subtle),
	}
}
