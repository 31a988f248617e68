package chat

import (
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/hiloop/hiloop/pkg/api"
)

// linePos is a line of the transcript: line of entry's block (its separating blank line, then
// its rendered lines).
type linePos struct{ entry, line int }

// block returns entry i's lines and whether a blank line separates it from the one above.
func (m *Model) block(i int) (lines []string, sep int) {
	lines = m.r.lines(m.t.entries[i], m.width)
	if i > 0 && len(lines) > 0 {
		sep = 1
	}
	return lines, sep
}

func (m *Model) blockHeight(i int) int {
	lines, sep := m.block(i)
	return len(lines) + sep
}

func (m *Model) blockLine(i, j int) string {
	lines, sep := m.block(i)
	if j < sep {
		return ""
	}
	return lines[j-sep]
}

// transcriptHeight is how many lines the transcript gets: the screen less the footer.
func (m *Model) transcriptHeight() int {
	panel := m.input.Height()
	if p := m.permissionOpen(); p != nil {
		panel = len(m.permissionLines(p))
	}
	return max(0, m.height-panel-2)
}

// bottomTop is the window's top when it shows the last h lines. Only the entries in the window
// are rendered: the transcript's total height is never needed.
func (m *Model) bottomTop(h int) linePos {
	need := h
	for i := len(m.t.entries) - 1; i >= 0; i-- {
		bh := m.blockHeight(i)
		if bh >= need {
			return linePos{i, bh - need}
		}
		need -= bh
	}
	return linePos{}
}

// move returns p moved by d lines, clamped to the transcript.
func (m *Model) move(p linePos, d int) linePos {
	n := len(m.t.entries)
	if n == 0 {
		return linePos{}
	}
	i, o := min(p.entry, n-1), p.line+d
	for o < 0 && i > 0 {
		i--
		o += m.blockHeight(i)
	}
	o = max(o, 0)
	for i < n-1 && o >= m.blockHeight(i) {
		o -= m.blockHeight(i)
		i++
	}
	if bh := m.blockHeight(i); o >= bh {
		o = max(0, bh-1)
	}
	return linePos{i, o}
}

// atBottom says whether the window at top, h lines high, reaches the transcript's end.
func (m *Model) atBottom(top linePos, h int) bool {
	seen := -top.line
	for i := top.entry; i < len(m.t.entries); i++ {
		seen += m.blockHeight(i)
		if seen > h {
			return false
		}
	}
	return true
}

func (m *Model) scrollBy(d int) {
	h := m.transcriptHeight()
	if m.follow {
		if d >= 0 {
			return
		}
		m.top, m.follow = m.bottomTop(h), false
	}
	m.top = m.move(m.top, d)
	if d > 0 && m.atBottom(m.top, h) {
		m.scrollBottom()
	}
}

func (m *Model) scrollTop() {
	m.top, m.follow = linePos{}, false
	if m.atBottom(m.top, m.transcriptHeight()) {
		m.scrollBottom()
	}
}

func (m *Model) scrollBottom() { m.follow, m.unseen = true, false }

func (m *Model) pageSize() int { return max(1, m.transcriptHeight()-2) }

// window returns the transcript's visible lines and the range of entries they come from.
func (m *Model) window(h int) (lines []string, first, last int) {
	if h <= 0 || len(m.t.entries) == 0 {
		return nil, 0, -1
	}
	top := m.top
	if m.follow || m.atBottom(top, h) {
		top = m.bottomTop(h)
	}
	first, last = top.entry, top.entry
	lines = make([]string, 0, h)
	for i, j := top.entry, top.line; i < len(m.t.entries) && len(lines) < h; i, j = i+1, 0 {
		bh := m.blockHeight(i)
		for ; j < bh && len(lines) < h; j++ {
			lines = append(lines, m.blockLine(i, j))
		}
		last = i
	}
	return lines, first, last
}

func (m *Model) visibleRange() (first, last int) {
	_, first, last = m.window(m.transcriptHeight())
	return first, last
}

// View implements tea.Model: the transcript's window, the line above the input (a note, or the
// hint that output arrived below), the input or the permission prompt, and the status line.
func (m *Model) View() tea.View {
	if m.deferred && m.viewValid {
		return m.viewCache
	}
	v := m.render()
	m.viewCache, m.viewValid, m.lastView = v, true, m.now()
	return v
}

func (m *Model) render() tea.View {
	var v tea.View
	v.AltScreen = true
	v.MouseMode = tea.MouseModeCellMotion
	if m.width <= 0 || m.height <= 0 {
		return v
	}
	footer := m.footer()
	th := max(0, m.height-len(footer))
	var body []string
	if m.help {
		body = m.helpLines(th)
	} else {
		body, _, _ = m.window(th)
	}
	var b strings.Builder
	for i := range th {
		if i < len(body) {
			b.WriteString(m.fit(body[i]))
		}
		b.WriteByte('\n')
	}
	for i, l := range footer {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(m.fit(l))
	}
	v.SetContent(b.String())
	if m.permissionOpen() == nil {
		if c := m.input.Cursor(); c != nil {
			c.Y += th + 1
			v.Cursor = c
		}
	}
	return v
}

// fit cuts a line to the screen's width, which a wide character or a long code line may pass.
func (m *Model) fit(l string) string {
	if len(l) <= m.width || ansi.StringWidth(l) <= m.width {
		return l
	}
	return ansi.Truncate(l, m.width, "")
}

// footer is everything under the transcript.
func (m *Model) footer() []string {
	lines := []string{m.ruleLine()}
	if p := m.permissionOpen(); p != nil {
		lines = append(lines, m.permissionLines(p)...)
	} else {
		lines = append(lines, m.inputLines()...)
	}
	return append(lines, m.statusLine())
}

// inputKey is what the input's rendering depends on.
type inputKey struct {
	value                   string
	width, height, row, col int
}

// inputLines renders the input, again only when it changed: streaming output redraws the
// screen many times a second while the input stays as it is.
func (m *Model) inputLines() []string {
	k := inputKey{m.input.Value(), m.input.Width(), m.input.Height(), m.input.Line(), m.input.Column()}
	if m.inputCache == nil || k != m.inputCacheKey {
		m.inputCache, m.inputCacheKey = strings.Split(m.input.View(), "\n"), k
	}
	return m.inputCache
}

// ruleLine separates the transcript from the input and carries a note or the new-output hint.
func (m *Model) ruleLine() string {
	w := m.width
	var text string
	style := m.st.Note
	switch {
	case m.note != "":
		text = m.note
	case m.conn.Err != nil && (m.conn.State == ConnReconnecting || m.conn.State == ConnClosed):
		// The status line says that the connection is down; this says why.
		text = "connection lost: " + errText(m.conn.Err)
		if m.conn.State == ConnClosed {
			text = "disconnected: " + errText(m.conn.Err)
		}
	case m.unseen && !m.follow:
		text, style = "↓ new output below · ctrl+end", m.st.Muted
	}
	if text == "" {
		if m.ruleCache == "" || m.ruleCacheWidth != w {
			// lipgloss measures what it styles: a full-width rule per frame shows in profiles.
			m.ruleCache, m.ruleCacheWidth = m.st.Rule.Render(strings.Repeat("─", w)), w
		}
		return m.ruleCache
	}
	text = ansi.Truncate(text, max(1, w-4), "…")
	rest := max(0, w-3-ansi.StringWidth(text))
	return m.st.Rule.Render("─ ") + style.Render(text) + " " + m.st.Rule.Render(strings.Repeat("─", rest))
}

func (m *Model) permissionLines(p *permission) []string {
	st, w := m.st, m.width
	what := firstNonEmpty(p.title, p.id)
	if p.kind != "" {
		what += " · " + p.kind
	}
	lines := prefixed(wrap("Allow "+what+"?", w-2), st.Permission.Render("?")+" ", "  ", st.Permission)
	labels := make([]string, len(p.options))
	labelW := 0
	for i, o := range p.options {
		labels[i] = firstNonEmpty(o.Name, strings.ReplaceAll(o.Kind, "_", " "))
		labelW = max(labelW, ansi.StringWidth(labels[i]))
	}
	labelW = min(labelW, max(1, w-8))
	for i, o := range p.options {
		mark, style := "  ", st.Message
		if i == m.permCursor {
			mark, style = st.Selected.Render("› "), st.Selected
		}
		label := ansi.Truncate(labels[i], labelW, "…")
		label += strings.Repeat(" ", labelW-ansi.StringWidth(label))
		line := "  " + mark + style.Render(label)
		if s := shortcutOf(o.Kind); s != "" {
			line += "  " + st.Key.Render(s)
		}
		lines = append(lines, line)
	}
	hint := "choose: ↑/↓ enter, or the key"
	if kind := m.answering[p.id]; kind != "" {
		hint = "answering: " + strings.ReplaceAll(kind, "_", " ") + "…"
	}
	return append(lines, "  "+st.Muted.Render(ansi.Truncate(hint, max(1, w-2), "…")))
}

// turnState is the status line's word for the turn.
func (m *Model) turnState() string {
	switch {
	case m.cancelling:
		return "cancelling…"
	case len(m.t.pending) > 0:
		return "waiting for permission"
	case m.t.running:
		return spinFrames[m.spin] + " running"
	case m.sending:
		return spinFrames[m.spin] + " sending"
	}
	return "idle"
}

// statusLine shows, left to right: sandbox and its state, harness, session id, turn state;
// tokens and connection on the right. What does not fit goes, least useful first.
func (m *Model) statusLine() string {
	type seg struct {
		text  string
		drop  int // the order segments go in when the line is too narrow; 0 stays
		right bool
	}
	sandbox := firstNonEmpty(m.opts.Sandbox, m.session.Sandbox)
	if m.sandboxState != "" {
		sandbox += " " + m.sandboxState
	}
	conn := m.conn.State.String()
	connDrop := 1
	if m.conn.State == ConnLive {
		connDrop = 4
	}
	segs := []seg{
		{text: sandbox},
		{text: m.session.Harness, drop: 3},
		{text: shortID(m.session.ID), drop: 2},
		{text: m.turnState()},
		{text: tokens(m.session.ModelUsage), drop: 5, right: true},
		{text: conn, drop: connDrop, right: true},
	}
	w := m.width - 2
	render := func() (string, int) {
		var left, right []string
		for _, s := range segs {
			switch {
			case s.text == "" || s.drop < 0:
			case s.right:
				right = append(right, s.text)
			default:
				left = append(left, s.text)
			}
		}
		l, r := strings.Join(left, " · "), strings.Join(right, " · ")
		return l + "\x00" + r, ansi.StringWidth(l) + ansi.StringWidth(r) + 1
	}
	line, width := render()
	for order := 5; width > w && order > 0; order-- {
		for i := range segs {
			if segs[i].drop == order {
				segs[i].drop = -1
			}
		}
		line, width = render()
	}
	l, r, _ := strings.Cut(line, "\x00")
	gap := max(1, w-ansi.StringWidth(l)-ansi.StringWidth(r))
	out := ansi.Truncate(" "+l+strings.Repeat(" ", gap)+r, m.width, "…")
	if pad := m.width - ansi.StringWidth(out); pad > 0 {
		out += strings.Repeat(" ", pad)
	}
	return m.st.Status.Render(out)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// tokens is "12.3k tok", or "12.3k/500k tok" with a budget, once the model route reported any.
func tokens(u *api.ModelUsage) string {
	switch {
	case u == nil || (u.TotalTokens == 0 && u.BudgetTokens == 0):
		return ""
	case u.BudgetTokens > 0:
		return humanCount(u.TotalTokens) + "/" + humanCount(u.BudgetTokens) + " tok"
	}
	return humanCount(u.TotalTokens) + " tok"
}

func humanCount(n int64) string {
	switch {
	case n >= 10_000_000:
		return strconv.FormatInt(n/1_000_000, 10) + "M"
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n >= 10_000:
		return strconv.FormatInt(n/1000, 10) + "k"
	case n >= 1000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatInt(n, 10)
}

// helpKeys are the keys the help overlay lists.
var helpKeys = [][2]string{
	{"enter", "send the prompt"},
	{"alt+enter ctrl+j", "new line"},
	{"↑ ↓", "earlier prompts (on the first / last line)"},
	{"pgup pgdn wheel", "scroll"},
	{"ctrl+home ctrl+end", "top / bottom (home / end with an empty input)"},
	{"ctrl+o", "expand or collapse the last tool call or thought on screen"},
	{"ctrl+c", "cancel the turn; twice, or with an empty input when idle: quit"},
	{"ctrl+d", "quit (the turn goes on in the sandbox)"},
	{"?", "this help (with an empty input)"},
	{"", ""},
	{"permission prompt", ""},
	{"↑ ↓ enter", "choose and answer"},
	{"y a", "allow once"},
	{"A", "allow always"},
	{"n", "reject once"},
	{"N", "reject always"},
}

func (m *Model) helpLines(h int) []string {
	st, w := m.st, m.width
	keyW := min(20, max(8, w/3))
	lines := []string{st.ToolTitle.Render("Keys") + st.Muted.Render("  (any key closes)"), ""}
	for _, k := range helpKeys {
		if k[1] == "" {
			lines = append(lines, st.ToolTitle.Render(k[0]))
			continue
		}
		desc := wrap(k[1], max(1, w-keyW-1))
		key := k[0]
		if ansi.StringWidth(key) > keyW {
			lines = append(lines, st.Key.Render(key))
			key = ""
		}
		for i, d := range desc {
			if i > 0 {
				key = ""
			}
			pad := max(0, keyW-ansi.StringWidth(key))
			lines = append(lines, st.Key.Render(key)+strings.Repeat(" ", pad)+" "+d)
		}
	}
	if len(lines) > h {
		lines = lines[:h]
	}
	return lines
}
