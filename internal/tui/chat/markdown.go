package chat

import (
	"strconv"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

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
	lines := m.blocks(mdParse(src), max(1, w))
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
func (m *mdWriter) blocks(n *mdNode, w int) []string {
	tight := n.kind == mdItem && n.parent.tight
	var out []string
	for _, c := range n.children {
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

func (m *mdWriter) block(n *mdNode, w int) []string {
	switch n.kind {
	case mdParagraph:
		return m.wrap(m.inline(n, lipgloss.NewStyle()), w)
	case mdHeading:
		return m.wrap(m.paint(m.st.Heading, strings.Repeat("#", n.level))+" "+m.inline(n, m.st.Heading), w)
	case mdCode:
		return m.code(n, w)
	case mdHTML:
		return hardwrap(strings.TrimRight(m.lines(n), "\n"), w)
	case mdList:
		return m.list(n, w)
	case mdQuote:
		bar := m.paint(m.st.Quote, "│")
		body := m.blocks(n, max(1, w-2))
		for i, l := range body {
			body[i] = bar + " " + l
		}
		return body
	case mdRule:
		return []string{m.paint(m.st.Border, "--------")}
	case mdTable:
		return m.table(n, w)
	}
	return m.blocks(n, w)
}

// lines is the source text of a block that keeps its lines (code, HTML), tabs expanded where
// the parser took part of one as indentation.
func (m *mdWriter) lines(n *mdNode) string {
	var b strings.Builder
	for _, l := range n.lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// code indents a code block by two columns and cuts its long lines, keeping their spaces.
func (m *mdWriter) code(n *mdNode, w int) []string {
	var out []string
	for _, l := range hardwrap(strings.TrimRight(m.lines(n), "\n"), max(1, w-2)) {
		out = append(out, "  "+m.paint(m.st.Code, l))
	}
	return out
}

// list renders items under their markers, continuation lines indented to the item's text.
func (m *mdWriter) list(l *mdNode, w int) []string {
	var out []string
	num := l.start
	for _, it := range l.children {
		mark := "• "
		if l.ordered {
			mark = strconv.Itoa(num) + string(l.marker) + " "
			num++
		}
		indent := ansi.StringWidth(mark)
		if hasTaskBox(it) {
			mark, indent = "", 4 // the "[ ] " the item's text starts with is its marker
		}
		if len(out) > 0 && !l.tight {
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

func hasTaskBox(item *mdNode) bool {
	return len(item.children) > 0 && len(item.children[0].children) > 0 && item.children[0].children[0].kind == mdTaskBox
}

// table lays a GFM table out in columns as wide as their widest cell, shrinking the widest
// column (its cells wrapped) until the table fits in w or no column is wider than three.
func (m *mdWriter) table(t *mdNode, w int) []string {
	n := len(t.aligns)
	var rows [][]string
	widths := make([]int, n)
	for _, r := range t.children {
		st := lipgloss.NewStyle()
		if r.header {
			st = m.st.Strong
		}
		cells := make([]string, n)
		for i, c := range r.children[:min(n, len(r.children))] {
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
				parts[i] = align(s, widths[i], t.aligns[i])
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
func align(s string, w int, a mdAlign) string {
	gap := max(0, w-ansi.StringWidth(s))
	switch a {
	case alignRight:
		return strings.Repeat(" ", gap) + s
	case alignCenter:
		return strings.Repeat(" ", gap/2) + s + strings.Repeat(" ", gap-gap/2)
	}
	return s + strings.Repeat(" ", gap)
}

// inline renders n's inline children in style st as one string; hard line breaks are newlines.
func (m *mdWriter) inline(n *mdNode, st lipgloss.Style) string {
	var b strings.Builder
	for _, c := range n.children {
		m.inlineNode(&b, c, st)
	}
	return b.String()
}

func (m *mdWriter) inlineNode(b *strings.Builder, n *mdNode, st lipgloss.Style) {
	switch n.kind {
	case mdText:
		b.WriteString(m.words(st, resolveText(n.lit)))
		switch {
		case n.hard:
			b.WriteByte('\n')
		case n.soft:
			b.WriteByte(' ')
		}
	case mdCodeSpan:
		b.WriteString(m.words(m.st.Code.Inherit(st), n.lit))
	case mdEmph:
		style, delim := m.st.Emph, "*"
		if n.level >= 2 {
			style, delim = m.st.Strong, "**"
		}
		m.delimited(b, n, style.Inherit(st), delim)
	case mdStrike:
		m.delimited(b, n, m.st.Strike.Inherit(st), "~~")
	case mdLink:
		m.link(b, m.inline(n, m.st.Link.Inherit(st)), m.plain(n), n.dest)
	case mdAutoLink:
		b.WriteString(m.words(m.st.URL, n.dest))
	case mdImage:
		b.WriteString(m.words(st, "Image: "+m.plain(n)+" →") + " " + m.words(m.st.URL, n.dest))
	case mdRawHTML:
		b.WriteString(m.words(st, n.lit))
	case mdTaskBox:
		if n.checked {
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
func (m *mdWriter) delimited(b *strings.Builder, n *mdNode, st lipgloss.Style, delim string) {
	if !m.st.Colour {
		b.WriteString(delim + m.inline(n, st) + delim)
		return
	}
	b.WriteString(m.inline(n, st))
}

// plain is the text of n's inline children without styles: a link's words, an image's alt.
func (m *mdWriter) plain(n *mdNode) string {
	var b strings.Builder
	for _, c := range n.children {
		switch c.kind {
		case mdText:
			b.WriteString(c.lit)
			if c.soft || c.hard {
				b.WriteByte(' ')
			}
		case mdCodeSpan:
			b.WriteString(c.lit)
		default:
			b.WriteString(m.plain(c))
		}
	}
	return b.String()
}

// wrap word-wraps styled text. Wrapping breaks a word longer than a line inside its style's
// span, so with colour on a line that leaves a style open closes it, and the next line opens it
// again: each line must stand alone on the screen.
func (m *mdWriter) wrap(s string, w int) []string {
	lines := wrap(s, w)
	if !m.st.Colour {
		return lines
	}
	open := ""
	for i, l := range lines {
		l, open = open+l, ""
		if sgr := lastSGR(l); sgr != "" && sgr != "\x1b[m" && sgr != "\x1b[0m" {
			open, l = sgr, l+"\x1b[m"
		}
		lines[i] = l
	}
	return lines
}

// lastSGR is the last select-graphic-rendition sequence in l, or "".
func lastSGR(l string) string {
	for j := len(l); j > 0; {
		j = strings.LastIndex(l[:j], "\x1b[")
		if j < 0 {
			break
		}
		k := strings.IndexFunc(l[j+2:], func(r rune) bool { return (r < '0' || r > '9') && r != ';' })
		if k >= 0 && l[j+2+k] == 'm' {
			return l[j : j+2+k+1]
		}
	}
	return ""
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
