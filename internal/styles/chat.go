package styles

import (
	"image/color"

	"charm.land/lipgloss/v2"
)

// Chat are the styles of the chat TUI (internal/tui/chat). Built with colour off, every style is empty, so the
// screen carries no escape sequence at all.
type Chat struct {
	Colour bool

	// Plain has no attributes: what the markdown's inline styles build on, and the style of
	// text that comes styled already.
	Plain lipgloss.Style

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

	// The agent's markdown. With colour off the renderer marks emphasis, strong and struck text
	// with their markdown delimiters instead, so meaning never rides on these alone.
	Heading lipgloss.Style // a heading, "#" marks included
	Emph    lipgloss.Style
	Strong  lipgloss.Style // strong text and a table's header row
	Strike  lipgloss.Style
	Code    lipgloss.Style // inline code and code blocks
	Link    lipgloss.Style // a link's text
	URL     lipgloss.Style // a link's address, printed after its text
	Quote   lipgloss.Style // the bar before a block quote's lines
	Border  lipgloss.Style // thematic breaks and a table's rules
}

// NewChat returns the chat's styles from the palette, coloured or plain. Colours the palette has
// not got come from attributes: the status bar is reversed, the rule and hints faint.
func NewChat(colour bool) Chat {
	plain := lipgloss.NewStyle()
	if !colour {
		return Chat{
			Plain: plain, PromptMark: plain, Prompt: plain, Message: plain, Thought: plain, ToolTitle: plain,
			ToolKind: plain, ToolOutput: plain, Running: plain, Done: plain, Failed: plain,
			DiffAdd: plain, DiffDel: plain, DiffHunk: plain, DiffCtx: plain, DiffPath: plain,
			PlanDone: plain, PlanActive: plain, PlanTodo: plain, Notice: plain, Error: plain,
			TurnEnd: plain, Muted: plain, Permission: plain, Selected: plain, Key: plain,
			Status: plain, StatusBold: plain, Note: plain, Rule: plain,
			Heading: plain, Emph: plain, Strong: plain, Strike: plain, Code: plain, Link: plain,
			URL: plain, Quote: plain, Border: plain,
		}
	}
	fg := func(c color.Color) lipgloss.Style { return plain.Foreground(c) }
	return Chat{
		Colour:     true,
		Plain:      plain,
		PromptMark: fg(ColorAccent).Bold(true),
		Prompt:     fg(ColorAccent),
		Message:    plain,
		Thought:    fg(ColorMuted).Italic(true),
		ToolTitle:  plain.Bold(true),
		ToolKind:   fg(ColorMuted),
		ToolOutput: fg(ColorMuted),
		Running:    fg(ColorWarning),
		Done:       fg(ColorSuccess),
		Failed:     fg(ColorError),
		DiffAdd:    fg(ColorSuccess),
		DiffDel:    fg(ColorError),
		DiffHunk:   fg(ColorNotice),
		DiffCtx:    fg(ColorMuted),
		DiffPath:   fg(ColorNotice).Bold(true),
		PlanDone:   fg(ColorMuted).Strikethrough(true),
		PlanActive: plain.Bold(true),
		PlanTodo:   plain,
		Notice:     fg(ColorWarning),
		Error:      fg(ColorError).Bold(true),
		TurnEnd:    fg(ColorMuted),
		Muted:      fg(ColorMuted),
		Permission: fg(ColorWarning).Bold(true),
		Selected:   fg(ColorAccent).Bold(true),
		Key:        fg(ColorAccent).Bold(true),
		Status:     plain.Reverse(true),
		StatusBold: plain.Reverse(true).Bold(true),
		Note:       fg(ColorWarning),
		Rule:       fg(ColorMuted).Faint(true),
		Heading:    fg(ColorAccent).Bold(true),
		Emph:       plain.Italic(true),
		Strong:     plain.Bold(true),
		Strike:     plain.Strikethrough(true),
		Code:       fg(ColorNotice),
		Link:       fg(ColorAccent),
		URL:        fg(ColorMuted),
		Quote:      fg(ColorMuted),
		Border:     fg(ColorMuted),
	}
}
