package chat

import (
	"strconv"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/hiloop/hiloop/internal/acpview"
	"github.com/hiloop/hiloop/internal/styles"
	"github.com/hiloop/hiloop/pkg/api"
)

// Collapsed tool calls show at most collapsedLines lines of their body, thoughts collapsedThought.
const (
	collapsedLines   = 6
	collapsedThought = 2
	// expandedLines bounds an expanded body: a tool's output can be a whole file.
	expandedLines = 2000
)

// renderer turns entries into lines of at most a given width.
type renderer struct {
	st styles.Chat
}

// lines returns e's lines at width w, from its cache when nothing changed.
func (r *renderer) lines(e *entry, w int) []string {
	if e.cacheValid && e.cacheWidth == w && e.cacheVersion == e.version && e.cacheExpanded == e.expanded {
		return e.cache
	}
	e.cache = r.render(e, w)
	e.cacheWidth, e.cacheVersion, e.cacheExpanded, e.cacheValid = w, e.version, e.expanded, true
	return e.cache
}

func (r *renderer) render(e *entry, w int) []string {
	st := r.st
	switch e.kind {
	case kindPrompt:
		return prefixed(wrap(string(e.text), w-2), st.PromptMark.Render("›")+" ", "  ", st.Prompt)
	case kindMessage:
		return r.message(e, w)
	case kindThought:
		return r.thought(e, w)
	case kindTool:
		return r.tool(e, w)
	case kindPlan:
		return r.plan(e, w)
	case kindPermission:
		return r.permission(e.perm, w)
	case kindNotice:
		return prefixed(wrap(string(e.text), w-2), st.Notice.Render("!")+" ", "  ", st.Notice)
	case kindError:
		return prefixed(wrap("error: "+string(e.text), w-2), st.Error.Render("✗")+" ", "  ", st.Error)
	case kindTurnEnd:
		return []string{st.TurnEnd.Render(ansi.Truncate(turnEndText(api.StopReason(e.text)), w, "…"))}
	case kindInfo:
		return prefixed(wrap(string(e.text), w-2), st.Muted.Render("·")+" ", "  ", st.Muted)
	}
	return nil
}

func turnEndText(r api.StopReason) string {
	switch r {
	case api.StopReasonCancelled:
		return "── turn cancelled"
	case api.StopReasonError:
		return "── turn failed"
	}
	return "── turn stopped: " + string(r)
}

// message renders agent text as markdown. While it streams, the text up to its last paragraph
// break outside a code fence is rendered as markdown piece by piece: each piece once, when a break
// ends it, its lines appended to those before. The paragraph being written is wrapped as plain
// text. So a chunk costs a wrap of one paragraph, and the whole message is rendered as markdown
// once, when it ends (pieces rendered apart may differ a little from the whole: a reference
// link defined in another piece, say).
func (r *renderer) message(e *entry, w int) []string {
	text := string(e.text)
	if e.final {
		e.prefixLines = nil
		return r.markdown(text, w)
	}
	if w != e.prefixWidth {
		e.prefixLen, e.prefixWidth, e.prefixLines = 0, w, nil
	}
	if cut := stableCut(text); cut > e.prefixLen {
		piece := r.markdown(text[e.prefixLen:cut], w)
		if len(piece) > 0 && len(e.prefixLines) > 0 {
			e.prefixLines = append(e.prefixLines, "")
		}
		e.prefixLines = append(e.prefixLines, piece...)
		e.prefixLen = cut
	}
	tail := strings.Trim(text[e.prefixLen:], "\n")
	lines := make([]string, len(e.prefixLines), len(e.prefixLines)+8)
	copy(lines, e.prefixLines)
	if tail != "" {
		if len(lines) > 0 {
			lines = append(lines, "")
		}
		for _, l := range wrap(tail, w) {
			lines = append(lines, r.st.Message.Render(l))
		}
	}
	return lines
}

// stableCut is the offset just after text's last blank line outside a fenced code block: what
// comes before it will not be re-read differently by a markdown parser as more text arrives.
func stableCut(text string) int {
	cut, fenced := 0, false
	for off := 0; off < len(text); {
		end := strings.IndexByte(text[off:], '\n')
		if end < 0 {
			break // the last line is unfinished
		}
		line := strings.TrimSpace(text[off : off+end])
		off += end + 1
		switch {
		case strings.HasPrefix(line, "```") || strings.HasPrefix(line, "~~~"):
			fenced = !fenced
		case line == "" && !fenced:
			cut = off
		}
	}
	return cut
}

func (r *renderer) thought(e *entry, w int) []string {
	st := r.st
	body := wrap(strings.TrimSpace(string(e.text)), w-2)
	if len(body) == 0 {
		body = []string{"thinking…"}
	}
	lines := prefixed(body, st.Thought.Render("∴")+" ", "  ", st.Thought)
	return r.collapse(lines, e.expanded, collapsedThought, w)
}

// collapse cuts lines to keep (the first one included) unless expanded, with a line saying how
// many are hidden and which key shows them.
func (r *renderer) collapse(lines []string, expanded bool, keep, w int) []string {
	limit := keep
	if expanded {
		limit = expandedLines
	}
	if len(lines) <= limit {
		return lines
	}
	hidden := len(lines) - limit
	more := "  … +" + strconv.Itoa(hidden) + " lines"
	if hidden == 1 {
		more = "  … +1 line"
	}
	if !expanded {
		more += " (ctrl+o)"
	}
	return append(lines[:limit:limit], r.st.Muted.Render(ansi.Truncate(more, w, "")))
}

func toolIcon(st styles.Chat, status string) string {
	switch status {
	case "completed":
		return st.Done.Render("✓")
	case "failed":
		return st.Failed.Render("✗")
	case "in_progress":
		return st.Running.Render("◐")
	}
	return st.Running.Render("○")
}

func (r *renderer) tool(e *entry, w int) []string {
	st := r.st
	tc := e.tool
	head := firstNonEmpty(tc.title, tc.id, "tool call")
	headLines := wrap(head, w-2)
	for i := range headLines {
		headLines[i] = st.ToolTitle.Render(headLines[i])
	}
	if tc.kind != "" {
		last := len(headLines) - 1
		suffix := " · " + tc.kind
		if ansi.StringWidth(ansi.Strip(headLines[last]))+ansi.StringWidth(suffix) <= w-2 {
			headLines[last] += st.ToolKind.Render(suffix)
		}
	}
	lines := prefixed(headLines, toolIcon(st, tc.status)+" ", "  ", st.Plain)

	var body []string
	for _, c := range tc.content {
		body = append(body, r.toolContent(c, w-2, e.expanded)...)
	}
	if len(tc.content) == 0 {
		for _, p := range tc.locations {
			body = append(body, st.ToolOutput.Render(ansi.Truncate(p, w-2, "…")))
		}
	}
	body = r.collapse(body, e.expanded, collapsedLines, w-2)
	for _, l := range body {
		lines = append(lines, "  "+l)
	}
	return lines
}

// toolContent renders one content item of a tool call; a collapsed diff keeps one line of
// context around its changes, so what is shown is mostly what changed.
func (r *renderer) toolContent(c acpview.ToolContent, w int, expanded bool) []string {
	st := r.st
	switch c.Type {
	case "diff":
		old := ""
		if c.OldText != nil {
			old = *c.OldText
		}
		context := 1
		if expanded {
			context = 3
		}
		hunks, added, removed := unifiedDiff(lineDiff(old, c.NewText), context)
		head := c.Path
		if c.OldText == nil {
			head += " (new file)"
		}
		head = st.DiffPath.Render(ansi.Truncate(head, max(1, w-12), "…")) + " " +
			st.DiffAdd.Render("+"+strconv.Itoa(added)) + " " + st.DiffDel.Render("-"+strconv.Itoa(removed))
		out := []string{head}
		for _, h := range hunks {
			style := st.DiffCtx
			switch h[0] {
			case '+':
				style = st.DiffAdd
			case '-':
				style = st.DiffDel
			case '@':
				style = st.DiffHunk
			}
			for _, l := range hardwrap(h, w) {
				out = append(out, style.Render(l))
			}
		}
		return out
	case "terminal":
		return []string{st.ToolOutput.Render(ansi.Truncate("[terminal "+c.Terminal+"]", w, "…"))}
	}
	var out []string
	for _, l := range hardwrap(strings.TrimRight(c.Text, "\n"), w) {
		out = append(out, st.ToolOutput.Render(l))
	}
	return out
}

func (r *renderer) plan(e *entry, w int) []string {
	st := r.st
	lines := []string{st.ToolTitle.Render("Plan")}
	for _, it := range e.plan {
		mark, style := "☐", st.PlanTodo
		switch it.status {
		case "completed":
			mark, style = "✓", st.PlanDone
		case "in_progress":
			mark, style = "▶", st.PlanActive
		}
		lines = append(lines, prefixed(wrap(it.content, w-4), "  "+mark+" ", "    ", style)...)
	}
	return lines
}

func (r *renderer) permission(p *permission, w int) []string {
	st := r.st
	d := p.decision
	if p.policy == api.PolicyAutoApprove && (d == nil || d.By == api.ResolvedByAutoApprove) {
		return nil // the harness's tool call entry says it all
	}
	what := firstNonEmpty(p.title, p.id)
	if p.kind != "" {
		what += " · " + p.kind
	}
	lines := prefixed(wrap("permission: "+what, w-2), st.Permission.Render("?")+" ", "  ", st.Permission)
	if d == nil {
		return append(lines, "  "+st.Muted.Render(ansi.Truncate("waiting for an answer", w-2, "…")))
	}
	icon, style := st.Done.Render("✓"), st.Done
	if d.Outcome == api.OutcomeCancelled || strings.HasPrefix(d.Kind, "reject") {
		icon, style = st.Failed.Render("✗"), st.Failed
	}
	return append(lines, prefixed(wrap(decisionText(*d, p.operator), w-4), "  "+icon+" ", "    ", style)...)
}

// decisionText says how a permission request was decided and by whom.
func decisionText(d api.PermissionDecision, operator string) string {
	if d.Outcome == api.OutcomeCancelled {
		if d.By == api.ResolvedByTurnEnd {
			return "cancelled: the turn ended first"
		}
		return "cancelled"
	}
	s := kindVerb(d.Kind)
	switch {
	case d.By == api.ResolvedByAutoApprove:
		return s + " automatically"
	case operator != "":
		return s + " by " + operator
	case d.By == api.ResolvedByOperator:
		return s + " by an operator"
	}
	return s + " (" + string(d.By) + ")"
}

func kindVerb(kind string) string {
	for _, k := range optionKinds {
		if k.kind == kind {
			return k.verb
		}
	}
	return "answered " + kind
}

// wrap word-wraps text to w columns (breaking words longer than a line) and splits it into
// lines. Tabs become spaces: their width is the terminal's business, not the wrapper's.
func wrap(text string, w int) []string {
	w = max(1, w)
	text = strings.ReplaceAll(text, "\t", "    ")
	if ansi.StringWidth(text) <= w && !strings.Contains(text, "\n") {
		return []string{text}
	}
	return strings.Split(ansi.Wrap(text, w, ""), "\n")
}

// hardwrap cuts text into lines of w columns, keeping spaces: for code, output and diffs.
func hardwrap(text string, w int) []string {
	w = max(1, w)
	text = strings.ReplaceAll(text, "\t", "    ")
	return strings.Split(ansi.Hardwrap(text, w, true), "\n")
}

// prefixed styles lines and puts first before the first one and rest before the others.
func prefixed(lines []string, first, rest string, style lipgloss.Style) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		p := rest
		if i == 0 {
			p = first
		}
		out[i] = p + style.Render(l)
	}
	return out
}
