package chat

// The goldmark renderer the chat used before it parsed markdown itself, kept as the reference
// the chat's own parser is compared with (TestMarkdownMatchesGoldmark).

import (
	"strconv"
	"strings"
	"sync"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"

	"github.com/hiloop/hiloop/internal/styles"
)

// gmParser is built on first use, so a hiloop command that shows no chat pays nothing for it.
var gmParser = sync.OnceValue(func() parser.Parser {
	return goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser()
})

// markdown renders text as CommonMark with GitHub's tables, strikethrough, task lists and bare
// links, in lines of at most w columns (a table that cannot shrink enough is the exception),
// without blank lines at its edges. Code is not highlighted. With colour off no line holds an
// escape sequence: emphasis keeps its delimiters instead.
func (r *renderer) gmMarkdown(src string, w int) []string {
	if strings.TrimSpace(src) == "" {
		return nil
	}
	m := gmWriter{st: r.st, src: []byte(src)}
	lines := m.blocks(gmParser().Parse(text.NewReader(m.src)), max(1, w))
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

// gmWriter turns one parsed document into lines.
type gmWriter struct {
	st  styles.Chat
	src []byte
}

// blocks renders n's child blocks with a blank line between two, except in a tight list's item.
func (m *gmWriter) blocks(n ast.Node, w int) []string {
	tight := false
	if l, ok := n.Parent().(*ast.List); ok && n.Kind() == ast.KindListItem {
		tight = l.IsTight
	}
	var out []string
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
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

func (m *gmWriter) block(n ast.Node, w int) []string {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		return m.wrap(m.inline(n, lipgloss.NewStyle()), w)
	case *ast.Heading:
		return m.wrap(m.paint(m.st.Heading, strings.Repeat("#", n.Level))+" "+m.inline(n, m.st.Heading), w)
	case *ast.FencedCodeBlock, *ast.CodeBlock:
		return m.code(n, w)
	case *ast.HTMLBlock:
		return hardwrap(strings.TrimRight(m.lines(n), "\n"), w)
	case *ast.List:
		return m.list(n, w)
	case *ast.Blockquote:
		bar := m.paint(m.st.Quote, "│")
		body := m.blocks(n, max(1, w-2))
		for i, l := range body {
			body[i] = bar + " " + l
		}
		return body
	case *ast.ThematicBreak:
		return []string{m.paint(m.st.Border, "--------")}
	case *east.Table:
		return m.table(n, w)
	}
	return m.blocks(n, w)
}

// lines is the source text of a block that keeps its lines (code, HTML), tabs expanded where
// the parser took part of one as indentation.
func (m *gmWriter) lines(n ast.Node) string {
	var b strings.Builder
	ls := n.Lines()
	for i := range ls.Len() {
		seg := ls.At(i)
		b.WriteString(strings.Repeat(" ", seg.Padding))
		b.Write(seg.Value(m.src))
	}
	if h, ok := n.(*ast.HTMLBlock); ok && h.HasClosure() {
		b.Write(h.ClosureLine.Value(m.src))
	}
	return b.String()
}

// code indents a code block by two columns and cuts its long lines, keeping their spaces.
func (m *gmWriter) code(n ast.Node, w int) []string {
	var out []string
	for _, l := range hardwrap(strings.TrimRight(m.lines(n), "\n"), max(1, w-2)) {
		out = append(out, "  "+m.paint(m.st.Code, l))
	}
	return out
}

// list renders items under their markers, continuation lines indented to the item's text.
func (m *gmWriter) list(l *ast.List, w int) []string {
	var out []string
	num := l.Start
	for it := l.FirstChild(); it != nil; it = it.NextSibling() {
		mark := "• "
		if l.IsOrdered() {
			mark = strconv.Itoa(num) + string(l.Marker) + " "
			num++
		}
		indent := ansi.StringWidth(mark)
		if gmHasTaskBox(it) {
			mark, indent = "", 4 // the "[ ] " the item's text starts with is its marker
		}
		if len(out) > 0 && !l.IsTight {
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

func gmHasTaskBox(item ast.Node) bool {
	if first := item.FirstChild(); first != nil {
		_, ok := first.FirstChild().(*east.TaskCheckBox)
		return ok
	}
	return false
}

// table lays a GFM table out in columns as wide as their widest cell, shrinking the widest
// column (its cells wrapped) until the table fits in w or no column is wider than three.
func (m *gmWriter) table(t *east.Table, w int) []string {
	n := len(t.Alignments)
	var rows [][]string
	widths := make([]int, n)
	for r := t.FirstChild(); r != nil; r = r.NextSibling() {
		st := lipgloss.NewStyle()
		if r.Kind() == east.KindTableHeader {
			st = m.st.Strong
		}
		cells := make([]string, n)
		i := 0
		for c := r.FirstChild(); c != nil && i < n; c, i = c.NextSibling(), i+1 {
			cells[i] = m.inline(c, st)
			widths[i] = max(widths[i], ansi.StringWidth(cells[i]))
		}
		rows = append(rows, cells)
	}
	for gmSum(widths)+3*(n-1) > w {
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
				parts[i] = gmAlign(s, widths[i], t.Alignments[i])
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

func gmSum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// align pads s to w columns as a table column asks.
func gmAlign(s string, w int, a east.Alignment) string {
	gap := max(0, w-ansi.StringWidth(s))
	switch a {
	case east.AlignRight:
		return strings.Repeat(" ", gap) + s
	case east.AlignCenter:
		return strings.Repeat(" ", gap/2) + s + strings.Repeat(" ", gap-gap/2)
	}
	return s + strings.Repeat(" ", gap)
}

// inline renders n's inline children in style st as one string; hard line breaks are newlines.
func (m *gmWriter) inline(n ast.Node, st lipgloss.Style) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		m.inlineNode(&b, c, st)
	}
	return b.String()
}

func (m *gmWriter) inlineNode(b *strings.Builder, n ast.Node, st lipgloss.Style) {
	switch n := n.(type) {
	case *ast.Text:
		v := n.Value(m.src)
		if !n.IsRaw() {
			v = util.ResolveEntityNames(util.ResolveNumericReferences(util.UnescapePunctuations(v)))
		}
		b.WriteString(m.words(st, string(v)))
		switch {
		case n.HardLineBreak():
			b.WriteByte('\n')
		case n.SoftLineBreak():
			b.WriteByte(' ')
		}
	case *ast.String:
		b.WriteString(m.words(st, string(n.Value)))
	case *ast.CodeSpan:
		b.WriteString(m.words(m.st.Code.Inherit(st), m.plain(n)))
	case *ast.Emphasis:
		style, delim := m.st.Emph, "*"
		if n.Level >= 2 {
			style, delim = m.st.Strong, "**"
		}
		m.delimited(b, n, style.Inherit(st), delim)
	case *east.Strikethrough:
		m.delimited(b, n, m.st.Strike.Inherit(st), "~~")
	case *ast.Link:
		m.link(b, m.inline(n, m.st.Link.Inherit(st)), m.plain(n), string(n.Destination))
	case *ast.AutoLink:
		b.WriteString(m.words(m.st.URL, string(n.URL(m.src))))
	case *ast.Image:
		b.WriteString(m.words(st, "Image: "+m.plain(n)+" →") + " " + m.words(m.st.URL, string(n.Destination)))
	case *ast.RawHTML:
		for i := range n.Segments.Len() {
			seg := n.Segments.At(i)
			b.WriteString(m.words(st, string(seg.Value(m.src))))
		}
	case *east.TaskCheckBox:
		if n.IsChecked {
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
func (m *gmWriter) link(b *strings.Builder, styled, plain, dest string) {
	if plain != "" && plain != dest {
		b.WriteString(styled)
		b.WriteByte(' ')
	}
	b.WriteString(m.words(m.st.URL, dest))
}

// delimited writes n's children in st, or between delim's with colour off.
func (m *gmWriter) delimited(b *strings.Builder, n ast.Node, st lipgloss.Style, delim string) {
	if !m.st.Colour {
		b.WriteString(delim + m.inline(n, st) + delim)
		return
	}
	b.WriteString(m.inline(n, st))
}

// plain is the text of n's inline children without styles: a link's words, an image's alt.
func (m *gmWriter) plain(n ast.Node) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Value(m.src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		default:
			b.WriteString(m.plain(c))
		}
	}
	return b.String()
}

// wrap word-wraps styled text. Wrapping breaks a word longer than a line inside its style's
// span, so with colour on a line that leaves a style open closes it, and the next line opens it
// again: each line must stand alone on the screen.
func (m *gmWriter) wrap(s string, w int) []string {
	lines := wrap(s, w)
	if !m.st.Colour {
		return lines
	}
	open := ""
	for i, l := range lines {
		l, open = open+l, ""
		if sgr := gmLastSGR(l); sgr != "" && sgr != "\x1b[m" && sgr != "\x1b[0m" {
			open, l = sgr, l+"\x1b[m"
		}
		lines[i] = l
	}
	return lines
}

// lastSGR is the last select-graphic-rendition sequence in l, or "".
func gmLastSGR(l string) string {
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
func (m *gmWriter) paint(st lipgloss.Style, s string) string {
	if !m.st.Colour || s == "" {
		return s
	}
	return st.Render(s)
}

// words paints s word by word, so wrapping between words never splits one style's span over
// two lines (each line must stand alone on the screen).
func (m *gmWriter) words(st lipgloss.Style, s string) string {
	if !m.st.Colour {
		return s
	}
	ws := strings.Split(s, " ")
	for i, w := range ws {
		ws[i] = m.paint(st, w)
	}
	return strings.Join(ws, " ")
}
