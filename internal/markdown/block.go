package markdown

import (
	"strconv"
	"strings"
)

// Kind says what a Node is.
type Kind uint8

// The kinds of Node: blocks, then inlines; each names the fields it sets.
const (
	Document  Kind = iota
	Paragraph      // children: inlines
	Heading        // level; children: inlines
	CodeBlock      // lines: a fenced or indented code block's lines
	HTMLBlock      // lines: an HTML block's lines
	List           // ordered, start, marker, tight; children: items
	Item           // children: blocks
	Quote          // children: blocks
	Rule           // a thematic break
	Table          // aligns; children: rows, the header first
	Row            // header; children: cells
	Cell           // children: inlines

	Text     // lit: source text, its escapes and references resolved when written; hard, soft
	CodeSpan // lit: the code
	Emph     // level: 1 emphasis, 2 strong
	Strike   // children: inlines
	Link     // dest; children: the link's text
	Image    // dest; children: the description
	AutoLink // dest: the address as shown
	RawHTML  // lit
	TaskBox  // checked
)

// Align is a table column's alignment.
type Align uint8

const (
	AlignNone Align = iota
	AlignLeft
	AlignCenter
	AlignRight
)

// Node is a block or an inline of a parsed document. The exported fields are what a renderer
// reads; the rest is the parsers' state.
type Node struct {
	Kind     Kind
	Children []*Node
	Parent   *Node

	Lit     string
	Dest    string
	Level   int
	Hard    bool // a text followed by a hard line break
	Soft    bool // a text followed by a soft line break
	Checked bool
	Ordered bool
	Tight   bool
	Start   int
	Marker  byte // a list's: - + * for bullets, . or ) for ordered lists
	Aligns  []Align
	Header  bool
	delim   bool // a text that was a run of delimiters
	opener  bool // a text that was a link's or an image's opening bracket
	// the inline parser's list
	prev, next *Node
	Lines      []string // paragraph, heading, code and HTML source lines
	open       bool
	fenced     bool
	fence      string // the opening fence: its character repeated
	fenceInd   int    // the opening fence's indentation
	htmlType   int
	// list items: the marker's indentation and the content's offset from it
	markerCol, padding int
	// the first and last source lines, for telling tight lists from loose ones
	startLine, endLine int
}

func (n *Node) add(c *Node) *Node {
	c.Parent = n
	n.Children = append(n.Children, c)
	return c
}

func (n *Node) last() *Node {
	if len(n.Children) == 0 {
		return nil
	}
	return n.Children[len(n.Children)-1]
}

// mdSpace is what goldmark took for white space around a paragraph's lines.
const mdSpace = " \t\n\v\f\r"

// Parse parses a markdown document.
func Parse(src string) *Node {
	p := &mdBlockParser{doc: &Node{Kind: Document, open: true}, refs: map[string]mdRef{}}
	p.tip = p.doc
	src = strings.TrimSuffix(src, "\n")
	for line := range strings.SplitSeq(src, "\n") {
		p.lineNo++
		p.incorporate(line)
	}
	for p.tip != nil {
		p.finalize(p.tip, p.lineNo)
	}
	p.inlines(p.doc)
	return p.doc
}

// mdRef is a link reference definition.
type mdRef struct{ Dest string }

// mdBlockParser follows the CommonMark spec's parsing strategy: each line first continues the
// open blocks it can, then may open new ones, then is added to the innermost.
type mdBlockParser struct {
	doc, tip     *Node
	oldTip       *Node
	lastMatched  *Node
	refs         map[string]mdRef
	line         string
	offset       int
	column       int
	nextNonspace int
	nextNSCol    int
	indent       int
	indented     bool
	blank        bool
	partialTab   bool
	allClosed    bool
	lineNo       int
}

func (p *mdBlockParser) findNextNonspace() {
	i, cols := p.offset, p.column
	for i < len(p.line) {
		c := p.line[i]
		if c == ' ' {
			i++
			cols++
		} else if c == '\t' {
			i++
			cols += 4 - cols%4
		} else {
			break
		}
	}
	p.blank = i >= len(p.line)
	p.nextNonspace, p.nextNSCol = i, cols
	p.indent = cols - p.column
	p.indented = p.indent >= 4
}

func (p *mdBlockParser) advanceNextNonspace() {
	p.offset, p.column, p.partialTab = p.nextNonspace, p.nextNSCol, false
}

// advance moves count bytes on, or count columns when columns is set (a tab may be only
// partly consumed then).
func (p *mdBlockParser) advance(count int, columns bool) {
	for count > 0 && p.offset < len(p.line) {
		c := p.line[p.offset]
		if c == '\t' {
			toTab := 4 - p.column%4
			if columns {
				p.partialTab = toTab > count
				n := min(toTab, count)
				p.column += n
				if !p.partialTab {
					p.offset++
				}
				count -= n
			} else {
				p.partialTab = false
				p.column += toTab
				p.offset++
				count--
			}
		} else {
			p.partialTab = false
			p.offset++
			p.column++
			count--
		}
	}
}

// rest is what remains of the line, a partly consumed tab as the spaces left of it.
func (p *mdBlockParser) rest() string {
	if p.partialTab && p.offset < len(p.line) {
		return strings.Repeat(" ", 4-p.column%4) + p.line[p.offset+1:]
	}
	return p.line[min(p.offset, len(p.line)):]
}

func acceptsLines(n *Node) bool {
	return n.Kind == Paragraph || n.Kind == CodeBlock || n.Kind == HTMLBlock
}

func canContain(parent *Node, child Kind) bool {
	switch parent.Kind {
	case Document, Quote, Item:
		return child != Item
	case List:
		return child == Item
	}
	return false
}

func (p *mdBlockParser) addChild(kind Kind) *Node {
	for !canContain(p.tip, kind) {
		p.finalize(p.tip, p.lineNo-1)
	}
	n := p.tip.add(&Node{Kind: kind, open: true, startLine: p.lineNo})
	p.tip = n
	return n
}

func (p *mdBlockParser) closeUnmatched() {
	if !p.allClosed {
		for p.oldTip != p.lastMatched {
			parent := p.oldTip.Parent
			p.finalize(p.oldTip, p.lineNo-1)
			p.oldTip = parent
		}
		p.allClosed = true
	}
}

// continues says whether container n goes on with the current line: 0 yes, 1 no, 2 the line
// was a fence's end and is used up.
func (p *mdBlockParser) continues(n *Node) int {
	switch n.Kind {
	case Quote:
		if !p.indented && p.nextNonspace < len(p.line) && p.line[p.nextNonspace] == '>' {
			p.advanceNextNonspace()
			p.advance(1, false)
			if p.offset < len(p.line) && (p.line[p.offset] == ' ' || p.line[p.offset] == '\t') {
				p.advance(1, true)
			}
			return 0
		}
		return 1
	case Item:
		if p.blank {
			if len(n.Children) == 0 {
				return 1 // a blank line after an empty item ends it
			}
			p.advanceNextNonspace()
			return 0
		}
		if p.indent >= n.markerCol+n.padding {
			p.advance(n.markerCol+n.padding, true)
			return 0
		}
		return 1
	case Heading, Rule:
		return 1
	case CodeBlock:
		if n.fenced {
			if !p.indented && p.nextNonspace < len(p.line) && p.line[p.nextNonspace] == n.fence[0] {
				run := p.line[p.nextNonspace:]
				k := 0
				for k < len(run) && run[k] == n.fence[0] {
					k++
				}
				if k >= len(n.fence) && strings.Trim(run[k:], " \t") == "" {
					p.finalize(n, p.lineNo)
					return 2
				}
			}
			// skip up to the fence's indentation
			for i := n.fenceInd; i > 0 && p.offset < len(p.line) && (p.line[p.offset] == ' ' || p.line[p.offset] == '\t'); i-- {
				p.advance(1, true)
			}
			return 0
		}
		if p.indent >= 4 {
			p.advance(4, true)
			return 0
		}
		if p.blank {
			p.advanceNextNonspace()
			return 0
		}
		return 1
	case HTMLBlock:
		if p.blank && (n.htmlType == 6 || n.htmlType == 7) {
			return 1
		}
		return 0
	case Paragraph:
		if p.blank {
			return 1
		}
		return 0
	}
	return 0
}

func (p *mdBlockParser) incorporate(line string) {
	p.oldTip = p.tip
	p.offset, p.column, p.blank, p.partialTab = 0, 0, false, false
	p.line = line

	container := p.doc
	for {
		last := container.last()
		if last == nil || !last.open {
			break
		}
		container = last
		p.findNextNonspace()
		switch p.continues(container) {
		case 0:
			continue
		case 1:
			container = container.Parent
		case 2:
			return
		}
		break
	}
	p.allClosed = container == p.oldTip
	p.lastMatched = container

	matchedLeaf := container.Kind != Paragraph && acceptsLines(container)
	for !matchedLeaf {
		p.findNextNonspace()
		if !p.indented && !mdMaybeSpecial(p.line, p.nextNonspace) {
			p.advanceNextNonspace()
			break
		}
		started := p.blockStart(container)
		if started == 0 {
			// A paragraph's line keeps its indentation, which tells a table's delimiter row
			// from an indented line.
			if p.tip.Kind != Paragraph {
				p.advanceNextNonspace()
			}
			break
		}
		container = p.tip
		if started == 2 {
			break // a leaf
		}
		if acceptsLines(container) && container.Kind != Paragraph {
			matchedLeaf = true
		}
	}

	// What is left of the line: a lazy paragraph continuation, or the innermost block's.
	if !p.allClosed && !p.blank && p.tip.Kind == Paragraph {
		p.tip.Lines = append(p.tip.Lines, p.rest())
		return
	}
	p.closeUnmatched()

	switch {
	case acceptsLines(container):
		if container.Kind == HTMLBlock {
			container.Lines = append(container.Lines, p.rest())
			if htmlBlockEnds(container.htmlType, p.line[min(p.offset, len(p.line)):]) {
				p.finalize(container, p.lineNo)
			}
			return
		}
		if container.Kind == Paragraph {
			container.Lines = append(container.Lines, p.rest())
			return
		}
		container.Lines = append(container.Lines, p.rest())
	case p.offset < len(p.line) && !p.blank:
		n := p.addChild(Paragraph)
		p.advanceNextNonspace()
		n.Lines = append(n.Lines, p.rest())
	}
}

// mdMaybeSpecial says whether the character at i may begin a block other than a paragraph.
func mdMaybeSpecial(line string, i int) bool {
	if i >= len(line) {
		return false
	}
	switch c := line[i]; {
	case c == '>' || c == '#' || c == '`' || c == '~' || c == '<' || c == '*' || c == '+' || c == '-' || c == '_' || c == '=':
		return true
	case c >= '0' && c <= '9':
		return true
	}
	return false
}

// blockStart opens the block the line begins, if any: 0 none, 1 a container, 2 a leaf.
func (p *mdBlockParser) blockStart(container *Node) int {
	if p.indented {
		if p.tip.Kind != Paragraph && !p.blank {
			p.advance(4, true)
			p.closeUnmatched()
			p.addChild(CodeBlock)
			return 2
		}
		return 0
	}
	rest := p.line[p.nextNonspace:]
	c := rest[0]
	// block quote
	if c == '>' {
		p.advanceNextNonspace()
		p.advance(1, false)
		if p.offset < len(p.line) && (p.line[p.offset] == ' ' || p.line[p.offset] == '\t') {
			p.advance(1, true)
		}
		p.closeUnmatched()
		p.addChild(Quote)
		return 1
	}
	// ATX heading
	if c == '#' {
		k := 0
		for k < len(rest) && rest[k] == '#' {
			k++
		}
		if k <= 6 && (k == len(rest) || rest[k] == ' ' || rest[k] == '\t') {
			p.advanceNextNonspace()
			p.advance(k, false)
			p.closeUnmatched()
			h := p.addChild(Heading)
			h.Level = k
			h.Lines = []string{atxContent(p.line[p.offset:])}
			p.advance(len(p.line)-p.offset, false)
			p.finalize(h, p.lineNo)
			return 2
		}
	}
	// fenced code
	if c == '`' || c == '~' {
		k := 0
		for k < len(rest) && rest[k] == c {
			k++
		}
		if k >= 3 && (c == '~' || !strings.Contains(rest[k:], "`")) {
			p.closeUnmatched()
			n := p.addChild(CodeBlock)
			n.fenced, n.fence, n.fenceInd = true, rest[:k], p.indent
			p.advanceNextNonspace()
			p.advance(k, false)
			p.advance(len(p.line)-p.offset, false)
			return 2
		}
	}
	// HTML block
	if c == '<' {
		for t := 1; t <= 7; t++ {
			if htmlBlockStarts(t, rest) && (t < 7 || (container.Kind != Paragraph && !(!p.allClosed && !p.blank && p.tip.Kind == Paragraph))) {
				p.closeUnmatched()
				n := p.addChild(HTMLBlock)
				n.htmlType = t
				return 2
			}
		}
	}
	// setext heading underline
	if (c == '=' || c == '-') && container.Kind == Paragraph {
		if lvl := setextLevel(rest); lvl > 0 {
			p.closeUnmatched()
			// Link reference definitions at its start are not the heading's.
			lines := p.takeRefs(container.Lines)
			if len(lines) > 0 {
				h := &Node{Kind: Heading, Level: lvl, Lines: []string{strings.TrimRight(strings.Join(lines, "\n"), " \t")},
					startLine: container.startLine}
				parent := container.Parent
				parent.Children[len(parent.Children)-1] = h
				h.Parent = parent
				p.tip = h
				p.advance(len(p.line)-p.offset, false)
				p.finalize(h, p.lineNo)
				return 2
			}
			container.Lines = nil
			container.open = false
			parent := container.Parent
			parent.Children = parent.Children[:len(parent.Children)-1]
			p.tip = parent
		}
	}
	// thematic break
	if isRule(rest) {
		p.closeUnmatched()
		p.addChild(Rule)
		p.advance(len(p.line)-p.offset, false)
		p.finalize(p.tip, p.lineNo)
		return 2
	}
	// list item
	if c == '*' || c == '+' || c == '-' || (c >= '0' && c <= '9') {
		if p.listItem(container) {
			return 1
		}
	}
	return 0
}

// listItem opens a list item (and its list) if the line begins one.
func (p *mdBlockParser) listItem(container *Node) bool {
	rest := p.line[p.nextNonspace:]
	item := &Node{Kind: Item, open: true, markerCol: p.indent}
	var width int
	var ordered bool
	var start int
	var marker byte
	if c := rest[0]; c == '*' || c == '+' || c == '-' {
		marker, width = c, 1
	} else {
		k := 0
		for k < len(rest) && k < 9 && rest[k] >= '0' && rest[k] <= '9' {
			k++
		}
		if k == 0 || k >= len(rest) || (rest[k] != '.' && rest[k] != ')') {
			return false
		}
		start, _ = strconv.Atoi(rest[:k])
		if container.Kind == Paragraph && start != 1 {
			return false
		}
		ordered, marker, width = true, rest[k], k+1
	}
	// The marker must be followed by a space, a tab or the end of the line.
	if width < len(rest) && rest[width] != ' ' && rest[width] != '\t' {
		return false
	}
	// An empty item cannot interrupt a paragraph.
	if container.Kind == Paragraph && strings.Trim(rest[width:], " \t") == "" {
		return false
	}
	p.advanceNextNonspace()
	p.advance(width, true)
	spacesStartCol, spacesStartOff := p.column, p.offset
	for {
		p.advance(1, true)
		p.findNextNonspace()
		if !(p.column-spacesStartCol < 5 && (p.offset < len(p.line) && (p.line[p.offset] == ' ' || p.line[p.offset] == '\t'))) {
			break
		}
	}
	blankItem := p.offset >= len(p.line) || strings.Trim(p.line[p.offset:], " \t") == ""
	if p.offset > len(p.line) {
		p.offset = len(p.line)
	}
	p.findNextNonspace()
	spaces := p.column - spacesStartCol
	if spaces >= 5 || spaces < 1 || blankItem {
		// The content starts one space after the marker.
		item.padding = width + 1
		p.column, p.offset, p.partialTab = spacesStartCol, spacesStartOff, false
		if spacesStartOff < len(p.line) && (p.line[spacesStartOff] == ' ' || p.line[spacesStartOff] == '\t') {
			p.advance(1, true)
		}
	} else {
		item.padding = width + spaces
	}
	p.closeUnmatched()
	// A new list, unless this item continues the open one.
	if p.tip.Kind != List || !sameList(p.tip, ordered, marker) {
		l := p.addChild(List)
		l.Ordered, l.Start, l.Marker = ordered, start, marker
	}
	item.startLine = p.lineNo
	p.tip.add(item)
	p.tip = item
	return true
}

func sameList(l *Node, ordered bool, marker byte) bool {
	return l.Ordered == ordered && l.Marker == marker
}

// atxContent is an ATX heading's text without its closing sequence.
func atxContent(s string) string {
	s = strings.Trim(s, " \t")
	t := strings.TrimRight(s, "#")
	if t == "" {
		return ""
	}
	if len(t) < len(s) && (t[len(t)-1] == ' ' || t[len(t)-1] == '\t') {
		s = t
	}
	return strings.Trim(s, " \t")
}

func setextLevel(rest string) int {
	s := strings.TrimRight(rest, " \t")
	if s == "" {
		return 0
	}
	c := s[0]
	if strings.Trim(s, string(c)) != "" {
		return 0
	}
	if c == '=' {
		return 1
	}
	return 2
}

func isRule(rest string) bool {
	c := rest[0]
	if c != '*' && c != '-' && c != '_' {
		return false
	}
	n := 0
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case c:
			n++
		case ' ', '\t':
		default:
			return false
		}
	}
	return n >= 3
}

// htmlBlockTags are the tags that begin an HTML block of type 6, each between spaces: a
// constant, so that nothing is built at start-up.
const htmlBlockTags = " address article aside base basefont blockquote body caption center col colgroup dd " +
	" details dialog dir div dl dt fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 head header hr " +
	" html iframe legend li link main menu menuitem nav noframes ol optgroup option p param search section summary table " +
	" tbody td tfoot th thead title tr track ul "

// htmlBlockStarts says whether line (from its first non-space) begins an HTML block of type t.
func htmlBlockStarts(t int, line string) bool {
	lower := strings.ToLower(line)
	switch t {
	case 1:
		for _, tag := range []string{"<script", "<pre", "<style", "<textarea"} {
			if strings.HasPrefix(lower, tag) {
				r := line[len(tag):]
				if r == "" || r[0] == ' ' || r[0] == '\t' || r[0] == '>' {
					return true
				}
			}
		}
	case 2:
		return strings.HasPrefix(line, "<!--")
	case 3:
		return strings.HasPrefix(line, "<?")
	case 4:
		return len(line) > 2 && line[1] == '!' && line[2] >= 'A' && line[2] <= 'Z'
	case 5:
		return strings.HasPrefix(line, "<![CDATA[")
	case 6:
		s := lower[1:]
		s = strings.TrimPrefix(s, "/")
		k := 0
		for k < len(s) && (s[k] >= 'a' && s[k] <= 'z' || k > 0 && s[k] >= '0' && s[k] <= '9') {
			k++
		}
		if k == 0 {
			return false
		}
		if !strings.Contains(htmlBlockTags, " "+s[:k]+" ") {
			return false
		}
		r := s[k:]
		return r == "" || r[0] == ' ' || r[0] == '\t' || r[0] == '>' || strings.HasPrefix(r, "/>")
	case 7:
		n := htmlTag(line)
		return n > 0 && strings.Trim(line[n:], " \t") == ""
	}
	return false
}

// htmlBlockEnds says whether line ends an HTML block of type t (types 6 and 7 end at a blank line).
func htmlBlockEnds(t int, line string) bool {
	lower := strings.ToLower(line)
	switch t {
	case 1:
		return strings.Contains(lower, "</script>") || strings.Contains(lower, "</pre>") ||
			strings.Contains(lower, "</style>") || strings.Contains(lower, "</textarea>")
	case 2:
		return strings.Contains(line, "-->")
	case 3:
		return strings.Contains(line, "?>")
	case 4:
		return strings.Contains(line, ">")
	case 5:
		return strings.Contains(line, "]]>")
	}
	return false
}

// finalize closes block n; a paragraph then gives up its link reference definitions and may
// turn out to be a table.
func (p *mdBlockParser) finalize(n *Node, line int) {
	above := n.Parent
	n.open = false
	n.endLine = line
	switch n.Kind {
	case Paragraph:
		n.Lines = p.takeRefs(n.Lines)
		if len(n.Lines) == 0 {
			above.Children = above.Children[:len(above.Children)-1]
		} else {
			p.table(n)
		}
	case CodeBlock:
		// Blank lines at the end of a code block that ends without its fence, or of an indented
		// one, do not make a list loose: as goldmark saw it, they are between blocks.
		trailing := 0
		for trailing < len(n.Lines) && strings.Trim(n.Lines[len(n.Lines)-1-trailing], " \t") == "" {
			trailing++
		}
		if n.fenced {
			if line != p.lineNo || n.startLine == p.lineNo {
				n.endLine = max(n.startLine, n.endLine-trailing)
			}
			n.Lines = n.Lines[min(1, len(n.Lines)):] // the info string's line
		} else {
			n.endLine = max(n.startLine, n.endLine-trailing)
			n.Lines = n.Lines[:len(n.Lines)-trailing]
		}
	case Item:
		if last := n.last(); last != nil {
			n.endLine = last.endLine
		} else {
			n.endLine = n.startLine
		}
	case List:
		n.endLine = n.last().endLine
		// Loose when a blank line separates two of its items or two blocks of an item.
		n.Tight = true
		for i, item := range n.Children {
			if i+1 < len(n.Children) && item.endLine < n.Children[i+1].startLine-1 {
				n.Tight = false
			}
			for j := 0; j+1 < len(item.Children); j++ {
				if item.Children[j].endLine < item.Children[j+1].startLine-1 {
					n.Tight = false
				}
			}
		}
	}
	p.tip = above
}

// inlines parses the inline content of every paragraph, heading and table cell under n.
func (p *mdBlockParser) inlines(n *Node) {
	switch n.Kind {
	case Paragraph, Heading, Cell:
		lines := n.Lines
		if n.Kind == Paragraph {
			for i, l := range lines {
				lines[i] = strings.TrimLeft(l, mdSpace)
			}
		}
		text := strings.Join(lines, "\n")
		if n.Kind == Paragraph {
			text = strings.TrimRight(text, " \t")
		}
		n.Lines = nil
		(&mdInlineParser{refs: p.refs, taskList: n.Kind == Paragraph && isFirstInItem(n)}).parse(n, text)
		return
	}
	for _, c := range n.Children {
		p.inlines(c)
	}
}

func isFirstInItem(n *Node) bool {
	return n.Parent != nil && n.Parent.Kind == Item && n.Parent.Children[0] == n
}

// table turns paragraph n into a table where one of its lines is a delimiter row under a
// header of as many cells: the lines before the header stay the paragraph's, the lines after
// the delimiter row are the table's rows.
func (p *mdBlockParser) table(n *Node) {
	for i := 1; i < len(n.Lines); i++ {
		aligns := tableDelims(n.Lines[i])
		if aligns == nil {
			continue
		}
		header := tableRow(n.Lines[i-1], aligns, true)
		if len(header.Children) != len(aligns) {
			return
		}
		t := &Node{Kind: Table, Aligns: aligns}
		t.add(header)
		for _, l := range n.Lines[i+1:] {
			t.add(tableRow(l, aligns, false))
		}
		parent := n.Parent
		at := 0
		for at < len(parent.Children) && parent.Children[at] != n {
			at++
		}
		n.Lines = n.Lines[:i-1]
		if len(n.Lines) == 0 {
			parent.Children[at] = t
			t.Parent = parent
		} else {
			parent.Children = append(parent.Children[:at+1], append([]*Node{t}, parent.Children[at+1:]...)...)
			t.Parent = parent
		}
		return
	}
}

func tableDelims(line string) []Align {
	if indentWidth(line) > 3 {
		return nil
	}
	s := strings.Trim(line, " \t")
	if !strings.Contains(s, "-") || strings.Trim(s, "|:- \t") != "" {
		return nil
	}
	cols := strings.Split(s, "|")
	if strings.Trim(cols[0], " \t") == "" {
		cols = cols[1:]
	}
	if len(cols) > 0 && strings.Trim(cols[len(cols)-1], " \t") == "" {
		cols = cols[:len(cols)-1]
	}
	var aligns []Align
	for _, c := range cols {
		c = strings.Trim(c, " \t")
		left, right := strings.HasPrefix(c, ":"), strings.HasSuffix(c, ":")
		inner := strings.TrimSuffix(strings.TrimPrefix(c, ":"), ":")
		if inner == "" || strings.Trim(inner, "-") != "" {
			return nil
		}
		switch {
		case left && right:
			aligns = append(aligns, AlignCenter)
		case left:
			aligns = append(aligns, AlignLeft)
		case right:
			aligns = append(aligns, AlignRight)
		default:
			aligns = append(aligns, AlignNone)
		}
	}
	return aligns
}

// indentWidth is the columns of white space line begins with, tabs to the next multiple of 4.
func indentWidth(line string) int {
	w := 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case ' ':
			w++
		case '\t':
			w += 4 - w%4
		default:
			return w
		}
	}
	return w
}

// tableRow splits a row into cells at its unescaped pipes: a header keeps every cell, a body
// row as many as the header has, padded with empty ones.
func tableRow(line string, aligns []Align, header bool) *Node {
	row := &Node{Kind: Row, Header: header}
	s := strings.Trim(line, " \t")
	pos, limit := 0, len(s)
	if limit > 0 && s[0] == '|' {
		pos++
	}
	if limit > 0 && s[limit-1] == '|' {
		limit--
	}
	i := 0
	for ; pos < limit; i++ {
		if i >= len(aligns) && !header {
			return row
		}
		end := pos
		for end < limit && !(s[end] == '|' && (end == 0 || s[end-1] != '\\')) {
			end++
		}
		cell := strings.Trim(s[pos:end], " \t")
		// A pipe escaped inside a code span is the code's.
		row.add(&Node{Kind: Cell, Lines: []string{cell}})
		pos = end + 1
	}
	for ; i < len(aligns); i++ {
		row.add(&Node{Kind: Cell})
	}
	return row
}

// takeRefs parses the link reference definitions at the start of a paragraph's lines into
// p.refs and returns the lines after them.
func (p *mdBlockParser) takeRefs(lines []string) []string {
	text := strings.Join(lines, "\n")
	consumed := 0
	for {
		n, label, dest, ok := parseRefDef(text[consumed:])
		if !ok {
			break
		}
		if key := normalizeLabel(label); key != "" {
			if _, dup := p.refs[key]; !dup {
				p.refs[key] = mdRef{Dest: dest}
			}
		}
		consumed += n
	}
	if consumed == 0 {
		return lines
	}
	rest := text[consumed:]
	if strings.Trim(rest, " \t\n") == "" {
		return nil
	}
	return strings.Split(rest, "\n")
}

// parseRefDef reads one link reference definition at the start of s: its length (through
// its line's end), label and destination.
func parseRefDef(s string) (n int, label, dest string, ok bool) {
	i := 0
	for i < len(s) && i < 3 && s[i] == ' ' {
		i++
	}
	l := linkLabel(s[i:])
	if l < 0 || i+l >= len(s) || s[i+l] != ':' {
		return 0, "", "", false
	}
	label = s[i+1 : i+l-1]
	i += l + 1
	i = skipSpaceNL(s, i)
	d, dn, ok := linkDest(s[i:])
	if !ok || dn == 0 {
		return 0, "", "", false
	}
	i += dn
	beforeTitle := i
	j := skipSpaceNL(s, i)
	// a title, which must be followed by the end of its line; else the definition ends before it
	if j > i && j < len(s) {
		if tn := linkTitle(s[j:]); tn > 0 {
			k := j + tn
			for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
				k++
			}
			if k == len(s) || s[k] == '\n' {
				if k < len(s) {
					k++
				}
				return k, label, d, true
			}
		}
	}
	k := beforeTitle
	for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
		k++
	}
	if k < len(s) && s[k] != '\n' {
		return 0, "", "", false
	}
	if k < len(s) {
		k++
	}
	return k, label, d, true
}

func skipSpaceNL(s string, i int) int {
	nl := false
	for i < len(s) {
		switch s[i] {
		case ' ', '\t':
		case '\n':
			if nl {
				return i
			}
			nl = true
		default:
			return i
		}
		i++
	}
	return i
}

// normalizeLabel is a link label's matching key: case folded, whitespace collapsed.
func normalizeLabel(label string) string {
	return strings.ToLower(strings.ToUpper(strings.Join(strings.Fields(label), " ")))
}
