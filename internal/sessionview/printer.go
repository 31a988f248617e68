// Package sessionview renders a session's events for people on a terminal: a turn as it
// streams (Printer: the agent's text on stdout, tool calls, plans, permission requests and
// errors on stderr) and one event on one line (Summary). It reads ACP updates through
// internal/acpview. The CLI uses it; the daemon must not (it holds styles and terminal rules).
package sessionview

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"charm.land/lipgloss/v2"

	"github.com/hiloop/hiloop/internal/acpview"
	"github.com/hiloop/hiloop/internal/styles"
	"github.com/hiloop/hiloop/pkg/api"
)

// Printer shows one turn's events as they stream.
type Printer struct {
	out, errOut io.Writer
	session     string
	thoughts    bool
	dim         lipgloss.Style // what goes to stderr, faint so that the answer on stdout stands out
	// shared says stdout and stderr are both terminals, presumably one screen: a line one of
	// them left unfinished is ended (on stderr) before the other writes.
	shared         bool
	outMid, errMid bool // the last byte written to stdout / stderr was not a newline
	// cut says a line on stderr came after text stdout left unfinished: where stdout is not the
	// terminal stderr draws on, the agent's next message starts on a line of its own there too,
	// not glued to the one before the tool call.
	cut    bool
	titles map[string]string // tool call id → title, for permission lines
}

// PrinterOptions say where a Printer writes and what it shows.
type PrinterOptions struct {
	Out, ErrOut io.Writer
	// Session is the session's id, for the commands a permission request shows.
	Session string
	// Thoughts shows the agent's thoughts (on ErrOut).
	Thoughts bool
	// Shared says Out and ErrOut are both terminals, presumably one screen.
	Shared bool
	// Dim styles what goes to ErrOut (the stderr styles' Dim).
	Dim lipgloss.Style
}

// NewPrinter returns a Printer of one session's turn.
func NewPrinter(o PrinterOptions) *Printer {
	return &Printer{out: o.Out, errOut: o.ErrOut, session: o.Session, thoughts: o.Thoughts,
		shared: o.Shared, dim: o.Dim, titles: map[string]string{}}
}

// Finish ends a line stdout or stderr left unfinished.
func (p *Printer) Finish() {
	if p.outMid {
		io.WriteString(p.out, "\n")
		p.outMid = false
	}
	p.endErrLine()
}

// Show renders one event for people: the agent's text to stdout, the rest to stderr. Events
// that say nothing to people (a prompt, a turn end) show nothing.
func (p *Printer) Show(ev api.SessionEvent) {
	switch ev.Type {
	case api.EventUpdate:
		u, err := acpview.Decode(ev.Data)
		if err != nil {
			return
		}
		switch u.Kind {
		case acpview.KindAgentMessageChunk:
			if text, ok := u.Text(); ok {
				p.writeOut(text)
			}
		case acpview.KindAgentThoughtChunk:
			if text, ok := u.Text(); ok && p.thoughts {
				p.writeErr(text)
			}
		case acpview.KindToolCall:
			p.titles[u.ToolCallID] = u.TitleText()
			p.line("▸ tool " + toolCallLine(u))
		case acpview.KindToolCallUpdate:
			if t := u.TitleText(); t != "" {
				p.titles[u.ToolCallID] = t
			}
			if u.Status != nil && *u.Status != "" {
				p.line(fmt.Sprintf("▸ %s %s", u.ToolCallID, *u.Status))
			}
		case acpview.KindPlan:
			p.line("▸ plan")
			for _, e := range u.Entries {
				p.line(fmt.Sprintf("  [%s] %s", e.Status, e.Content))
			}
		}
	case api.EventPermission:
		var d api.PermissionData
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		if d.Title != "" {
			p.titles[d.ToolCallID] = d.Title
		}
		if d.Policy == api.PolicyAutoApprove {
			return // the permission_resolved right after it says it all
		}
		p.line(fmt.Sprintf("? permission requested: %s [%s]", orUnnamed(p.titles[d.ToolCallID]), d.ToolCallID))
		p.line("  options: " + optionList(d.Options))
		for _, v := range []struct{ verb, once, always string }{
			{"approve", api.OptionAllowOnce, api.OptionAllowAlways},
			{"deny", api.OptionRejectOnce, api.OptionRejectAlways},
		} {
			if !offers(d.Options, v.once) && !offers(d.Options, v.always) {
				continue
			}
			cmd := fmt.Sprintf("hiloop session %s %s %s", v.verb, p.session, shellQuote(d.ToolCallID))
			if !offers(d.Options, v.once) {
				cmd += " --option " + v.always
			} else if offers(d.Options, v.always) {
				cmd += " [--option " + v.always + "]"
			}
			p.line(fmt.Sprintf("  %-8s %s", v.verb+":", cmd))
		}
	case api.EventPermissionResolved:
		var d api.PermissionDecision
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		p.line("▸ " + ResolvedLine(d, p.titles[d.ToolCallID]))
	case api.EventNotice:
		var d api.NoticeData
		if json.Unmarshal(ev.Data, &d) == nil {
			p.line("▸ notice: " + d.Message)
		}
	case api.EventError:
		var d api.ErrorData
		if json.Unmarshal(ev.Data, &d) == nil {
			p.line("hiloop: error: " + ErrorText(d))
		}
	}
}

// ErrorText renders an error event: its message, and the harness log unless the message names it.
func ErrorText(d api.ErrorData) string {
	if d.HarnessLog == "" || strings.Contains(d.Message, d.HarnessLog) {
		return d.Message
	}
	return d.Message + " (harness log: " + d.HarnessLog + ")"
}

// writeOut writes the agent's text to stdout.
func (p *Printer) writeOut(s string) {
	if s == "" {
		return
	}
	if p.shared {
		p.endErrLine()
	}
	if p.cut && p.outMid && !p.shared {
		io.WriteString(p.out, "\n")
	}
	p.cut = false
	io.WriteString(p.out, s)
	p.outMid = !strings.HasSuffix(s, "\n")
}

// writeErr writes a piece of a thought to stderr.
func (p *Printer) writeErr(s string) {
	if s == "" {
		return
	}
	if p.shared && p.outMid {
		io.WriteString(p.errOut, "\n")
		p.outMid = false
	}
	io.WriteString(p.errOut, styles.RenderText(p.dim, s))
	p.errMid = !strings.HasSuffix(s, "\n")
}

// line writes a whole line to stderr, on a line of its own.
func (p *Printer) line(s string) {
	p.cut = true
	p.endErrLine()
	p.writeErr(s + "\n")
}

// endErrLine ends the line stderr left unfinished, if it did.
func (p *Printer) endErrLine() {
	if p.errMid {
		io.WriteString(p.errOut, "\n")
		p.errMid = false
	}
}

// toolCallLine is "TITLE (kind) [ID]".
func toolCallLine(u acpview.Update) string {
	s := orUnnamed(u.TitleText())
	if u.ToolKind != nil && *u.ToolKind != "" {
		s += " (" + *u.ToolKind + ")"
	}
	return s + " [" + u.ToolCallID + "]"
}

func orUnnamed(title string) string {
	if title == "" {
		return "a tool"
	}
	return title
}

func optionList(opts []api.PermissionOption) string {
	parts := make([]string, len(opts))
	for i, o := range opts {
		parts[i] = o.Kind
		if o.Name != "" {
			parts[i] += " (" + o.Name + ")"
		}
	}
	return strings.Join(parts, ", ")
}

func offers(opts []api.PermissionOption, kind string) bool {
	for _, o := range opts {
		if o.Kind == kind {
			return true
		}
	}
	return false
}

// ResolvedLine says how a permission request was answered; title names the tool call, if known.
func ResolvedLine(d api.PermissionDecision, title string) string {
	what := d.ToolCallID
	if title != "" {
		what = title + " [" + d.ToolCallID + "]"
	}
	switch {
	case d.Outcome == api.OutcomeCancelled && d.By == api.ResolvedByTurnEnd:
		return what + " cancelled: the turn ended first"
	case d.Outcome == api.OutcomeCancelled:
		return what + " cancelled"
	case d.By == api.ResolvedByAutoApprove:
		return "auto-approved " + what + " (" + d.Kind + ")"
	case d.Kind == api.OptionAllowOnce || d.Kind == api.OptionAllowAlways:
		return what + " approved by operator" + operatorSuffix(d) + " (" + d.Kind + ")"
	}
	return what + " denied" + operatorSuffix(d) + " (" + d.Kind + ")"
}

// operatorSuffix names who answered, when the answer said.
func operatorSuffix(d api.PermissionDecision) string {
	if d.Operator == "" {
		return ""
	}
	return " " + d.Operator
}

// Summary is the short rendering of an event on one line, as `hiloop session events` shows it.
func Summary(ev api.SessionEvent) string {
	switch ev.Type {
	case api.EventPrompt:
		var d api.PromptPost
		if json.Unmarshal(ev.Data, &d) == nil {
			return snippet(d.Text)
		}
	case api.EventUpdate:
		if u, err := acpview.Decode(ev.Data); err == nil {
			return updateSummary(u)
		}
	case api.EventPermission:
		var d api.PermissionData
		if json.Unmarshal(ev.Data, &d) == nil {
			return fmt.Sprintf("%s [%s] %s; options: %s", orUnnamed(d.Title), d.ToolCallID, d.Policy, optionList(d.Options))
		}
	case api.EventPermissionResolved:
		var d api.PermissionDecision
		if json.Unmarshal(ev.Data, &d) == nil {
			s := fmt.Sprintf("[%s] %s", d.ToolCallID, d.Outcome)
			if d.Kind != "" {
				s += " " + d.Kind
			}
			return s + " by " + string(d.By) + operatorSuffix(d)
		}
	case api.EventTurnEnd:
		var d api.TurnEndData
		if json.Unmarshal(ev.Data, &d) == nil {
			return string(d.StopReason)
		}
	case api.EventError:
		var d api.ErrorData
		if json.Unmarshal(ev.Data, &d) == nil {
			return ErrorText(d)
		}
	case api.EventNotice:
		var d api.NoticeData
		if json.Unmarshal(ev.Data, &d) == nil {
			return d.Message
		}
	}
	return snippet(string(ev.Data))
}

// updateSummary is Summary's line of an ACP update: its kind, and what says most about it.
func updateSummary(u acpview.Update) string {
	switch u.Kind {
	case acpview.KindToolCall:
		s := string(u.Kind) + " " + toolCallLine(u)
		if u.Status != nil {
			s += " " + *u.Status
		}
		return s
	case acpview.KindToolCallUpdate:
		s := string(u.Kind) + " [" + u.ToolCallID + "]"
		if t := u.TitleText(); t != "" {
			s += " " + t
		}
		if u.Status != nil {
			s += " " + *u.Status
		}
		return s
	case acpview.KindPlan:
		return fmt.Sprintf("plan: %d entries", len(u.Entries))
	}
	if text, ok := u.Text(); ok {
		return string(u.Kind) + " " + snippet(text)
	}
	return string(u.Kind)
}

// snippet quotes the start of s, cut to a line's worth of runes.
func snippet(s string) string {
	const max = 60
	if utf8.RuneCountInString(s) <= max {
		return strconv.Quote(s)
	}
	cut := 0
	for range max {
		_, n := utf8.DecodeRuneInString(s[cut:])
		cut += n
	}
	return strconv.Quote(s[:cut]) + "…"
}

// shellQuote quotes s for a POSIX shell if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
