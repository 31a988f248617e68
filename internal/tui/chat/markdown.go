package chat

import (
	"strconv"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/hiloop/hiloop/internal/markdown"
	"github.com/hiloop/hiloop/internal/styles"
)

// markdown renders text as CommonMark with GitHub's tables, strikethrough, task lists and bare
// links, in lines of at most w columns (a table that cannot shrink enough is the exception),
// without blank lines at its edges. Code is not highlighted. With colour off no line holds an
// escape sequence: emphasis keeps its delimiters instead.
func (r *renderer) markdown(src string, w int) []string {
	if strings.TrimSpace(src) == "" {
		return nil
	}
	m := mdWriter{st: r.st}
	lines := m.blocks(markdown.Parse(src), max(1, w))
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// mdWriter turns one parsed document into lines.
type mdWriter struct {
	st styles.Chat
}

// blocks renders n's child blocks with a blank line between two, except in a tight list's item.
func (m *mdWriter) blocks(n *markdown.Node, w int) []string {
	tight := n.Kind == markdown.Item && n.Parent.Tight
	var out []string
	for _, c := range n.Children {
		b := m.block(c, w)
		if len(b) == 0 {
			continue
		}
		if len(out) > 0 && !tight {
			out = append(out, "")
		}
		out = append(out, b...)
	}
	return out
}

func (m *mdWriter) block(n *markdown.Node, w int) []string {
	switch n.Kind {
	case markdown.Paragraph:
		return m.wrap(m.inline(n, m.st.Plain), w)
	case markdown.Heading:
		return m.wrap(m.paint(m.st.Heading, strings.Repeat("#", n.Level))+" "+m.inline(n, m.st.Heading), w)
	case markdown.CodeBlock:
		return m.code(n, w)
	case markdown.HTMLBlock:
		return hardwrap(strings.TrimRight(m.lines(n), "\n"), w)
	case markdown.List:
		return m.list(n, w)
	case markdown.Quote:
		bar := m.paint(m.st.Quote, "│")
		body := m.blocks(n, max(1, w-2))
		for i, l := range body {
			body[i] = bar + " " + l
		}
		return body
	case markdown.Rule:
		return []string{m.paint(m.st.Border, "--------")}
	case markdown.Table:
		return m.table(n, w)
	}
	return m.blocks(n, w)
}

// lines is the source text of a block that keeps its lines (code, HTML), tabs expanded where
// the parser took part of one as indentation.
func (m *mdWriter) lines(n *markdown.Node) string {
	var b strings.Builder
	for _, l := range n.Lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// code indents a code block by two columns and cuts its long lines, keeping their spaces.
func (m *mdWriter) code(n *markdown.Node, w int) []string {
	var out []string
	for _, l := range hardwrap(strings.TrimRight(m.lines(n), "\n"), max(1, w-2)) {
		out = append(out, "  "+m.paint(m.st.Code, l))
	}
	return out
}

// list renders items under their markers, continuation lines indented to the item's text.
func (m *mdWriter) list(l *markdown.Node, w int) []string {
	var out []string
	num := l.Start
	for _, it := range l.Children {
		mark := "• "
		if l.Ordered {
			mark = strconv.Itoa(num) + string(l.Marker) + " "
			num++
		}
		indent := ansi.StringWidth(mark)
		if hasTaskBox(it) {
			mark, indent = "", 4 // the "[ ] " the item's text starts with is its marker
		}
		if len(out) > 0 && !l.Tight {
			out = append(out, "")
		}
		body := m.blocks(it, max(1, w-indent))
		if len(body) == 0 {
			body = []string{""}
		}
		pad := strings.Repeat(" ", indent)
		for i, line := range body {
			switch {
			case i == 0:
				line = mark + line
			case line != "":
				line = pad + line
			}
			out = append(out, line)
		}
	}
	return out
}

func hasTaskBox(item *markdown.Node) bool {
	return len(item.Children) > 0 && len(item.Children[0].Children) > 0 && item.Children[0].Children[0].Kind == markdown.TaskBox
}

// table lays a GFM table out in columns as wide as their widest cell, shrinking the widest
// column (its cells wrapped) until the table fits in w or no column is wider than three.
func (m *mdWriter) table(t *markdown.Node, w int) []string {
	n := len(t.Aligns)
	var rows [][]string
	widths := make([]int, n)
	for _, r := range t.Children {
		st := m.st.Plain
		if r.Header {
			st = m.st.Strong
		}
		cells := make([]string, n)
		for i, c := range r.Children[:min(n, len(r.Children))] {
			cells[i] = m.inline(c, st)
			widths[i] = max(widths[i], ansi.StringWidth(cells[i]))
		}
		rows = append(rows, cells)
	}
	for sum(widths)+3*(n-1) > w {
		widest := 0
		for i := range widths {
			if widths[i] > widths[widest] {
				widest = i
			}
		}
		if widths[widest] <= 3 {
			break
		}
		widths[widest]--
	}
	sep := m.paint(m.st.Border, " │ ")
	var out []string
	for ri, cells := range rows {
		wrapped := make([][]string, n)
		height := 1
		for i, c := range cells {
			wrapped[i] = m.wrap(c, widths[i])
			height = max(height, len(wrapped[i]))
		}
		for l := range height {
			parts := make([]string, n)
			for i := range cells {
				s := ""
				if l < len(wrapped[i]) {
					s = wrapped[i][l]
				}
				parts[i] = align(s, widths[i], t.Aligns[i])
			}
			out = append(out, strings.Join(parts, sep))
		}
		if ri == 0 {
			rule := make([]string, n)
			for i, cw := range widths {
				rule[i] = strings.Repeat("─", cw)
			}
			out = append(out, m.paint(m.st.Border, strings.Join(rule, "─┼─")))
		}
	}
	return out
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// align pads s to w columns as a table column asks.
func align(s string, w int, a markdown.Align) string {
	gap := max(0, w-ansi.StringWidth(s))
	switch a {
	case markdown.AlignRight:
		return strings.Repeat(" ", gap) + s
	case markdown.AlignCenter:
		return strings.Repeat(" ", gap/2) + s + strings.Repeat(" ", gap-gap/2)
	}
	return s + strings.Repeat(" ", gap)
}

// inline renders n's inline children in style st as one string; hard line breaks are newlines.
func (m *mdWriter) inline(n *markdown.Node, st lipgloss.Style) string {
	var b strings.Builder
	for _, c := range n.Children {
		m.inlineNode(&b, c, st)
	}
	return b.String()
}

func (m *mdWriter) inlineNode(b *strings.Builder, n *markdown.Node, st lipgloss.Style) {
	switch n.Kind {
	case markdown.Text:
		b.WriteString(m.words(st, markdown.ResolveText(n.Lit)))
		switch {
		case n.Hard:
			b.WriteByte('\n')
		case n.Soft:
			b.WriteByte(' ')
		}
	case markdown.CodeSpan:
		b.WriteString(m.words(m.st.Code.Inherit(st), n.Lit))
	case markdown.Emph:
		style, delim := m.st.Emph, "*"
		if n.Level >= 2 {
			style, delim = m.st.Strong, "**"
		}
		m.delimited(b, n, style.Inherit(st), delim)
	case markdown.Strike:
		m.delimited(b, n, m.st.Strike.Inherit(st), "~~")
	case markdown.Link:
		m.link(b, m.inline(n, m.st.Link.Inherit(st)), m.plain(n), n.Dest)
	case markdown.AutoLink:
		b.WriteString(m.words(m.st.URL, n.Dest))
	case markdown.Image:
		b.WriteString(m.words(st, "Image: "+m.plain(n)+" →") + " " + m.words(m.st.URL, n.Dest))
	case markdown.RawHTML:
		b.WriteString(m.words(st, n.Lit))
	case markdown.TaskBox:
		if n.Checked {
			b.WriteString("[x] ")
		} else {
			b.WriteString("[ ] ")
		}
	default:
		b.WriteString(m.inline(n, st))
	}
}

// link writes a link's text and then its address, which a terminal may make clickable; a
// link whose text is its address shows once.
func (m *mdWriter) link(b *strings.Builder, styled, plain, dest string) {
	if plain != "" && plain != dest {
		b.WriteString(styled)
		b.WriteByte(' ')
	}
	b.WriteString(m.words(m.st.URL, dest))
}

// delimited writes n's children in st, or between delim's with colour off.
func (m *mdWriter) delimited(b *strings.Builder, n *markdown.Node, st lipgloss.Style, delim string) {
	if !m.st.Colour {
		b.WriteString(delim + m.inline(n, st) + delim)
		return
	}
	b.WriteString(m.inline(n, st))
}

// plain is the text of n's inline children without styles: a link's words, an image's alt.
func (m *mdWriter) plain(n *markdown.Node) string {
	var b strings.Builder
	for _, c := range n.Children {
		switch c.Kind {
		case markdown.Text:
			b.WriteString(c.Lit)
			if c.Soft || c.Hard {
				b.WriteByte(' ')
			}
		case markdown.CodeSpan:
			b.WriteString(c.Lit)
		default:
			b.WriteString(m.plain(c))
		}
	}
	return b.String()
}

// wrap word-wraps styled text; each line stands alone on the screen (styles.StandAlone).
func (m *mdWriter) wrap(s string, w int) []string {
	lines := wrap(s, w)
	if !m.st.Colour {
		return lines
	}
	return styles.StandAlone(lines)
}

// paint renders s in st, or leaves it alone with colour off.
func (m *mdWriter) paint(st lipgloss.Style, s string) string {
	if !m.st.Colour || s == "" {
		return s
	}
	return st.Render(s)
}

// words paints s word by word, so wrapping between words never splits one style's span over
// two lines (each line must stand alone on the screen).
func (m *mdWriter) words(st lipgloss.Style, s string) string {
	if !m.st.Colour {
		return s
	}
	ws := strings.Split(s, " ")
	for i, w := range ws {
		ws[i] = m.paint(st, w)
	}
	return strings.Join(ws, " ")
}
