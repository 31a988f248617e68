package markdown

import (
	"html"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// mdInlineParser reads a block's text into inlines: CommonMark's algorithm of a delimiter
// stack (emphasis, strikethrough) and a bracket stack (links, images) over a list of nodes.
type mdInlineParser struct {
	refs     map[string]mdRef
	taskList bool // the text is a list item's first paragraph: it may begin with a task box

	s          string
	pos        int
	textStart  int      // where the text not yet in a node begins
	afterNode  int      // just after the last node a construct made: goldmark tried bare links there
	at         int      // the next @ at or after pos, len(s) if none, -1 before the first look
	head, tail *Node    // the nodes so far, linked by prev and next
	delims     *mdDelim // the top of the delimiter stack
	brackets   []*mdBracket
}

// mdDelim is a run of * _ or ~ that may open or close emphasis or strikethrough.
type mdDelim struct {
	node              *Node // its text node, which loses the characters it gives up
	char              byte
	count, origCount  int
	canOpen, canClose bool
	prev, next        *mdDelim
}

// mdBracket is a [ or ![ that a ] may close into a link or an image.
type mdBracket struct {
	node   *Node
	image  bool
	pos    int // just after the bracket
	active bool
	delims *mdDelim // the delimiter stack's top when it was pushed
}

// parse reads text into block's children.
func (p *mdInlineParser) parse(block *Node, text string) {
	p.s, p.at = text, -1
	if p.taskList {
		if n := taskBox(text); n > 0 {
			p.push(&Node{Kind: TaskBox, Checked: text[1] == 'x' || text[1] == 'X'})
			p.pos, p.textStart = n, n
		}
	}
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		switch c {
		case '\n':
			p.newline()
			continue
		case '\\':
			if p.pos+1 < len(p.s) && p.s[p.pos+1] == '\n' {
				p.flushText(p.pos)
				p.lineBreak(true)
				p.pos += 2
				p.skipLeadingSpace()
				continue
			}
			if p.pos+1 < len(p.s) && isASCIIPunct(p.s[p.pos+1]) {
				p.pos += 2
				continue
			}
		case '`':
			if p.codeSpan() {
				continue
			}
		case '*', '_', '~':
			if p.delimRun(c) {
				continue
			}
		case '[':
			p.flushText(p.pos)
			n := p.push(&Node{Kind: Text, Lit: "[", opener: true})
			p.brackets = append(p.brackets, &mdBracket{node: n, pos: p.pos + 1, active: true, delims: p.delims})
			p.pos++
			p.textStart = p.pos
			p.afterNode = p.pos
			continue
		case '!':
			if p.pos+1 < len(p.s) && p.s[p.pos+1] == '[' {
				p.flushText(p.pos)
				n := p.push(&Node{Kind: Text, Lit: "![", opener: true})
				p.brackets = append(p.brackets, &mdBracket{node: n, image: true, pos: p.pos + 2, active: true, delims: p.delims})
				p.pos += 2
				p.textStart = p.pos
				p.afterNode = p.pos
				continue
			}
		case ']':
			if p.closeBracket() {
				continue
			}
		case '<':
			if p.angle() {
				continue
			}
		}
		if p.linkifyHere() && p.linkify() {
			continue
		}
		p.pos++
	}
	p.flushText(len(p.s))
	p.emphasis(nil)
	block.Children = nil
	adopt(block, listed(p.head, nil))
}

// listed is the nodes from first up to end, which are linked by next.
func listed(first, end *Node) []*Node {
	var out []*Node
	for n := first; n != end; n = n.next {
		out = append(out, n)
	}
	return out
}

// adopt makes nodes parent's children. What is left of a delimiter run joins the text before
// it, as goldmark's nodes did (a style's span then covers both).
func adopt(parent *Node, nodes []*Node) {
	parent.Children = parent.Children[:0]
	var joined []string // the pieces of the last child's text, when delimiter runs join it
	join := func() {
		if len(joined) > 1 {
			parent.last().Lit = strings.Join(joined, "")
		}
		joined = joined[:0]
	}
	for _, n := range nodes {
		if n.Kind == Text && n.Lit == "" && !n.Hard && !n.Soft {
			continue
		}
		if len(n.Children) > 0 {
			adopt(n, n.Children)
		}
		if prev := parent.last(); n.delim && prev != nil && prev.Kind == Text && !prev.Hard && !prev.Soft {
			if len(joined) == 0 {
				joined = append(joined, prev.Lit)
			}
			joined = append(joined, n.Lit)
			prev.Hard, prev.Soft = n.Hard, n.Soft
			continue
		}
		join()
		parent.add(n)
	}
	join()
}

func (p *mdInlineParser) push(n *Node) *Node {
	n.prev = p.tail
	if p.tail != nil {
		p.tail.next = n
	} else {
		p.head = n
	}
	p.tail = n
	return n
}

// unlink takes n out of the list of nodes.
func (p *mdInlineParser) unlink(n *Node) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		p.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		p.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

// removeDelim takes d off the delimiter stack.
func (p *mdInlineParser) removeDelim(d *mdDelim) {
	if d.prev != nil {
		d.prev.next = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	} else {
		p.delims = d.prev
	}
	d.prev, d.next = nil, nil
}

// flushText puts the text from textStart to end in a node, joined to a text node just before
// it.
func (p *mdInlineParser) flushText(end int) {
	if end <= p.textStart {
		p.textStart = max(p.textStart, end)
		return
	}
	p.push(&Node{Kind: Text, Lit: p.s[p.textStart:end]})
	p.textStart = end
}

// newline ends a line: a hard break after two spaces, else a soft one; spaces around it go.
func (p *mdInlineParser) newline() {
	// Two spaces make a hard break, and go with any white space before them; a soft break
	// takes one space or tab before it, as goldmark did.
	end := p.pos
	hard := p.pos-p.textStart >= 2 && p.s[p.pos-1] == ' ' && p.s[p.pos-2] == ' '
	switch {
	case hard:
		for end > p.textStart && (p.s[end-1] == ' ' || p.s[end-1] == '\t') {
			end--
		}
	case end > p.textStart && (p.s[end-1] == ' ' || p.s[end-1] == '\t'):
		end--
	}
	p.flushText(end)
	p.lineBreak(hard)
	p.pos++
	p.skipLeadingSpace()
}

func (p *mdInlineParser) skipLeadingSpace() {
	for p.pos < len(p.s) && strings.IndexByte(mdSpace, p.s[p.pos]) >= 0 && p.s[p.pos] != '\n' {
		p.pos++
	}
	p.textStart = p.pos
}

// lineBreak marks the last node a text followed by a line break, adding an empty one when the
// last is not a text.
func (p *mdInlineParser) lineBreak(hard bool) {
	last := p.tail
	if last == nil || last.Kind != Text || last.Hard || last.Soft || last.delim || last.opener {
		last = p.push(&Node{Kind: Text})
	}
	if hard {
		last.Hard = true
	} else {
		last.Soft = true
	}
}

// codeSpan reads a code span at pos, or leaves a backtick run unmatched as text.
func (p *mdInlineParser) codeSpan() bool {
	start := p.pos
	n := 0
	for start+n < len(p.s) && p.s[start+n] == '`' {
		n++
	}
	for i := start + n; i < len(p.s); {
		if p.s[i] != '`' {
			i++
			continue
		}
		k := 0
		for i+k < len(p.s) && p.s[i+k] == '`' {
			k++
		}
		if k == n {
			p.flushText(start)
			// Line ends stay in the code as goldmark kept them: the layout breaks the line there.
			code := p.s[start+n : i]
			if len(code) >= 2 && isCodeSpace(code[0]) && isCodeSpace(code[len(code)-1]) && strings.Trim(code, " \n") != "" {
				code = code[1 : len(code)-1]
			}
			p.push(&Node{Kind: CodeSpan, Lit: code})
			p.pos = i + k
			p.textStart = p.pos
			p.afterNode = p.pos
			return true
		}
		i += k
	}
	p.pos += n // the run is text
	p.afterNode = p.pos
	return true
}

// delimRun reads a run of c as a delimiter, or as text where it cannot be one.
func (p *mdInlineParser) delimRun(c byte) bool {
	start := p.pos
	n := 0
	for start+n < len(p.s) && p.s[start+n] == c {
		n++
	}
	if c == '~' && n > 2 {
		p.pos += n
		return true
	}
	before, after := ' ', ' '
	if start > 0 {
		i := start - 1
		for i > 0 && !utf8.RuneStart(p.s[i]) {
			i--
		}
		before, _ = utf8.DecodeRuneInString(p.s[i:])
	}
	if start+n < len(p.s) {
		after, _ = utf8.DecodeRuneInString(p.s[start+n:])
	}
	if c == '~' && before == '~' { // an escaped tilde's neighbour, as goldmark read it
		p.pos += n
		p.afterNode = p.pos
		return true
	}
	bSpace, aSpace := isMDSpace(before), isMDSpace(after)
	bPunct, aPunct := isMDPunct(before), isMDPunct(after)
	left := !aSpace && (!aPunct || bSpace || bPunct)
	right := !bSpace && (!bPunct || aSpace || aPunct)
	canOpen, canClose := left, right
	if c == '_' {
		canOpen = left && (!right || bPunct)
		canClose = right && (!left || aPunct)
	}
	p.flushText(start)
	node := p.push(&Node{Kind: Text, Lit: p.s[start : start+n], delim: true})
	if canOpen || canClose {
		d := &mdDelim{node: node, char: c, count: n, origCount: n, canOpen: canOpen, canClose: canClose, prev: p.delims}
		if p.delims != nil {
			p.delims.next = d
		}
		p.delims = d
	}
	p.pos = start + n
	p.textStart = p.pos
	p.afterNode = p.pos
	return true
}

// emphasis matches the delimiters above bottom on the stack (CommonMark's "process
// emphasis") and takes them off it.
func (p *mdInlineParser) emphasis(bottom *mdDelim) {
	type key struct {
		c       byte
		mod     int
		canOpen bool
	}
	openersBottom := map[key]*mdDelim{}
	closer := p.delims
	for closer != nil && closer.prev != bottom {
		closer = closer.prev
	}
	for closer != nil {
		if !closer.canClose {
			closer = closer.next
			continue
		}
		k := key{closer.char, closer.origCount % 3, closer.canOpen}
		stop, ok := openersBottom[k]
		if !ok {
			stop = bottom
		}
		opener := closer.prev
		for ; opener != nil && opener != bottom && opener != stop; opener = opener.prev {
			odd := (closer.canOpen || opener.canClose) && closer.origCount%3 != 0 &&
				(opener.origCount+closer.origCount)%3 == 0
			if opener.char == closer.char && opener.canOpen && !odd {
				break
			}
		}
		if opener == nil || opener == bottom || opener == stop {
			openersBottom[k] = closer.prev
			next := closer.next
			if !closer.canOpen {
				p.removeDelim(closer)
			}
			closer = next
			continue
		}
		use := 1
		if opener.count >= 2 && closer.count >= 2 {
			use = 2
		}
		opener.count -= use
		closer.count -= use
		opener.node.Lit = opener.node.Lit[:opener.count]
		closer.node.Lit = closer.node.Lit[:closer.count]
		kind := Emph
		if closer.char == '~' {
			kind = Strike
		}
		// The nodes between the two become the emphasis's children.
		em := &Node{Kind: kind, Level: use}
		em.Children = listed(opener.node.next, closer.node)
		em.prev, em.next = opener.node, closer.node
		opener.node.next, closer.node.prev = em, em
		// The delimiters between the two are spent.
		opener.next, closer.prev = closer, opener
		if opener.count == 0 {
			p.unlink(opener.node)
			p.removeDelim(opener)
		}
		if closer.count == 0 {
			next := closer.next
			p.unlink(closer.node)
			p.removeDelim(closer)
			closer = next
		}
	}
	for p.delims != nil && p.delims != bottom {
		p.removeDelim(p.delims)
	}
}

// closeBracket closes the innermost [ or ![ into a link or an image where a destination
// follows (inline or by reference); else the ] is text.
func (p *mdInlineParser) closeBracket() bool {
	if len(p.brackets) == 0 {
		return false
	}
	br := p.brackets[len(p.brackets)-1]
	if !br.active {
		p.brackets = p.brackets[:len(p.brackets)-1]
		return false
	}
	closePos := p.pos
	dest, end, ok := p.linkTail(closePos+1, p.s[br.pos:closePos])
	if !ok {
		p.brackets = p.brackets[:len(p.brackets)-1]
		return false
	}
	p.flushText(closePos)
	kind := Link
	if br.image {
		kind = Image
	}
	link := &Node{Kind: kind, Dest: dest}
	p.emphasis(br.delims)
	link.Children = listed(br.node.next, nil)
	br.node.next = nil
	p.tail = br.node
	p.unlink(br.node)
	p.push(link)
	p.brackets = p.brackets[:len(p.brackets)-1]
	if !br.image {
		for _, b := range p.brackets {
			if !b.image {
				b.active = false // no links in links
			}
		}
	}
	p.pos = end
	p.textStart = end
	p.afterNode = end
	return true
}

// linkTail reads what follows a link's ]: (destination "title"), [label], [] or nothing
// (a shortcut reference to the text itself).
func (p *mdInlineParser) linkTail(i int, text string) (dest string, end int, ok bool) {
	s := p.s
	if i < len(s) && s[i] == '(' {
		j := skipSpaceNL(s, i+1)
		d, n, ok := linkDest(s[j:])
		if ok {
			j += n
			k := skipSpaceNL(s, j)
			if k < len(s) {
				if tn := linkTitle(s[k:]); tn > 0 {
					k = skipSpaceNL(s, k+tn)
				}
			}
			if k < len(s) && s[k] == ')' {
				return d, k + 1, true
			}
		}
	}
	label, end := text, i
	if strings.HasPrefix(s[i:], "[]") {
		end = i + 2
	} else if i < len(s) && s[i] == '[' {
		if n := linkLabel(s[i:]); n > 0 {
			if n > 2 {
				label = s[i+1 : i+n-1]
			}
			end = i + n
		}
	}
	if len(label) > 999 {
		return "", 0, false
	}
	if ref, found := p.refs[normalizeLabel(label)]; found && strings.TrimSpace(label) != "" {
		return ref.Dest, end, true
	}
	return "", 0, false
}

// linkLabel is the length of the [label] at the start of s, or -1.
func linkLabel(s string) int {
	if s == "" || s[0] != '[' {
		return -1
	}
	for i := 1; i < len(s) && i < 1001; i++ {
		switch s[i] {
		case '\\':
			i++
		case '[':
			return -1
		case ']':
			if strings.TrimSpace(s[1:i]) == "" {
				return -1
			}
			return i + 1
		}
	}
	return -1
}

// linkDest reads a link destination: <...>, or a run without spaces and with balanced
// parentheses. Its text is as written, escapes and all.
func linkDest(s string) (dest string, n int, ok bool) {
	if strings.HasPrefix(s, "<") {
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '\n', '<':
				return "", 0, false
			case '>':
				return s[1:i], i + 1, true
			}
		}
		return "", 0, false
	}
	depth := 0
	i := 0
loop:
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && isASCIIPunct(s[i+1]):
			i++
		case c == '(':
			depth++
			if depth > 32 {
				return "", 0, false
			}
		case c == ')':
			if depth == 0 {
				break loop
			}
			depth--
		case c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r':
			break loop
		}
	}
	if depth != 0 {
		return "", 0, false
	}
	return s[:i], i, true
}

// linkTitle is the length of a "title", 'title' or (title) at the start of s, or 0.
func linkTitle(s string) int {
	if s == "" {
		return 0
	}
	closer := s[0]
	switch closer {
	case '"', '\'':
	case '(':
		closer = ')'
	default:
		return 0
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case c == closer:
			return i + 1
		case c == '(' && closer == ')':
			return 0
		case c == '\n' && i+1 < len(s) && s[i+1] == '\n':
			return 0
		}
	}
	return 0
}

// angle reads an autolink <scheme:...> or <address@host>, or inline HTML.
func (p *mdInlineParser) angle() bool {
	s := p.s[p.pos:]
	if end := strings.IndexByte(s, '>'); end > 0 {
		inner := s[1:end]
		if isURIAutolink(inner) || isEmailAutolink(inner) {
			p.flushText(p.pos)
			p.push(&Node{Kind: AutoLink, Dest: inner})
			p.pos += end + 1
			p.textStart = p.pos
			p.afterNode = p.pos
			return true
		}
	}
	if n := htmlInline(s); n > 0 {
		p.flushText(p.pos)
		p.push(&Node{Kind: RawHTML, Lit: s[:n]})
		p.pos += n
		p.textStart = p.pos
		p.afterNode = p.pos
		return true
	}
	return false
}

func isURIAutolink(s string) bool {
	colon := strings.IndexByte(s, ':')
	if colon < 2 || colon > 32 {
		return false
	}
	for i := 0; i < colon; i++ {
		c := s[i]
		if !(isASCIILetter(c) || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '.' || c == '-')) {
			return false
		}
	}
	for i := colon + 1; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == '<' || c == '>' || c == 0x7f {
			return false
		}
	}
	return true
}

func isEmailAutolink(s string) bool {
	at := strings.IndexByte(s, '@')
	if at < 1 {
		return false
	}
	for i := 0; i < at; i++ {
		if !isEmailLocal(s[i]) {
			return false
		}
	}
	labels := strings.Split(s[at+1:], ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			if !(isASCIIAlnum(l[i]) || l[i] == '-') {
				return false
			}
		}
	}
	return true
}

func isEmailLocal(c byte) bool {
	return isASCIIAlnum(c) || strings.IndexByte(".!#$%&'*+/=?^_`{|}~-", c) >= 0
}

// htmlInline is the length of the inline HTML at the start of s: a tag, a comment, a
// processing instruction, a declaration or a CDATA section; 0 if there is none.
func htmlInline(s string) int {
	switch {
	case strings.HasPrefix(s, "<!--"):
		if strings.HasPrefix(s, "<!-->") {
			return 5
		}
		if strings.HasPrefix(s, "<!--->") {
			return 6
		}
		if i := strings.Index(s[4:], "-->"); i >= 0 {
			return 4 + i + 3
		}
		return 0
	case strings.HasPrefix(s, "<?"):
		if i := strings.Index(s[2:], "?>"); i >= 0 {
			return 2 + i + 2
		}
		return 0
	case strings.HasPrefix(s, "<![CDATA["):
		if i := strings.Index(s[9:], "]]>"); i >= 0 {
			return 9 + i + 3
		}
		return 0
	case len(s) > 2 && s[1] == '!' && s[2] >= 'A' && s[2] <= 'Z':
		if i := strings.IndexByte(s, '>'); i >= 0 {
			return i + 1
		}
		return 0
	}
	return htmlTag(s)
}

// htmlTag is the length of the open or closing tag at the start of s, or 0.
func htmlTag(s string) int {
	if len(s) < 3 || s[0] != '<' {
		return 0
	}
	i := 1
	closing := s[i] == '/'
	if closing {
		i++
	}
	if i >= len(s) || !isASCIILetter(s[i]) {
		return 0
	}
	for i < len(s) && (isASCIIAlnum(s[i]) || s[i] == '-') {
		i++
	}
	if closing {
		i = skipHTMLSpace(s, i)
		if i < len(s) && s[i] == '>' {
			return i + 1
		}
		return 0
	}
	for {
		j := skipHTMLSpace(s, i)
		if j >= len(s) {
			return 0
		}
		if s[j] == '>' {
			return j + 1
		}
		if s[j] == '/' {
			if j+1 < len(s) && s[j+1] == '>' {
				return j + 2
			}
			return 0
		}
		if j == i { // an attribute needs space before it
			return 0
		}
		// attribute name
		if !(isASCIILetter(s[j]) || s[j] == '_' || s[j] == ':') {
			return 0
		}
		k := j + 1
		for k < len(s) && (isASCIIAlnum(s[k]) || strings.IndexByte("_.:-", s[k]) >= 0) {
			k++
		}
		// optional value
		v := skipHTMLSpace(s, k)
		if v < len(s) && s[v] == '=' {
			v = skipHTMLSpace(s, v+1)
			if v >= len(s) {
				return 0
			}
			switch q := s[v]; q {
			case '"', '\'':
				e := strings.IndexByte(s[v+1:], q)
				if e < 0 {
					return 0
				}
				k = v + 1 + e + 1
			default:
				e := v
				for e < len(s) && !(s[e] <= ' ' || strings.IndexByte("\"'=<>`", s[e]) >= 0) {
					e++
				}
				if e == v {
					return 0
				}
				k = e
			}
		}
		i = k
	}
}

func skipHTMLSpace(s string, i int) int {
	nl := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		if s[i] == '\n' {
			nl++
			if nl > 1 {
				return len(s)
			}
		}
		i++
	}
	return i
}

// linkifyHere says whether a bare link may begin at pos, outside a link's text: where
// goldmark looked for one, at the start of a line, after a space, a parenthesis or a * _ ~,
// and just after any other inline (a code span, a delimiter run, a tag).
func (p *mdInlineParser) linkifyHere() bool {
	if len(p.brackets) > 0 {
		return false
	}
	if p.pos == 0 || p.pos == p.afterNode {
		return true
	}
	switch p.s[p.pos-1] {
	case ' ', '\n':
		return true
	case '(', '*', '_', '~':
		return !escaped(p.s, p.pos-1)
	}
	return false
}

// escaped says whether the character at i follows an odd number of backslashes.
func escaped(s string, i int) bool {
	n := 0
	for i > 0 && s[i-1] == '\\' {
		n++
		i--
	}
	return n%2 == 1
}

// linkify makes the bare URL (http, https, ftp or www.) or email address at pos a link.
func (p *mdInlineParser) linkify() bool {
	s := p.s[p.pos:]
	end, proto := 0, ""
	switch {
	case strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"), strings.HasPrefix(s, "ftp://"):
		end = bareURL(s, strings.Index(s, "://")+3, true)
	case strings.HasPrefix(s, "www."):
		end, proto = bareURL(s, 4, false), "http://"
	}
	if end > 0 {
		end = trimURLEnd(s, end)
	} else {
		if s == "" || isASCIIPunct(s[0]) || !p.atAhead() {
			return false
		}
		end = bareEmail(s)
	}
	// trailing punctuation is not the link's
	i := end - 1
	for ; i > 0; i-- {
		if strings.IndexByte("?!.,:*_~", s[i]) < 0 {
			break
		}
	}
	end = i + 1
	if end <= 0 || (proto == "" && end <= 0) {
		return false
	}
	p.flushText(p.pos)
	p.push(&Node{Kind: AutoLink, Dest: proto + s[:end]})
	p.pos += end
	p.textStart = p.pos
	p.afterNode = p.pos
	return true
}

// atAhead says whether an @ follows pos: without one no email address can begin there.
func (p *mdInlineParser) atAhead() bool {
	if p.at < p.pos && p.at != len(p.s) {
		p.at = strings.IndexByte(p.s[p.pos:], '@')
		if p.at < 0 {
			p.at = len(p.s)
		} else {
			p.at += p.pos
		}
	}
	return p.at < len(p.s)
}

// bareURL is the length of the URL at the start of s whose host begins at host: the host up
// to its last dot followed by a lower-case top-level domain, then an optional port (URLs with
// a scheme) and path. 0 if there is none.
func bareURL(s string, host int, port bool) int {
	h := host
	for h < len(s) && h-host < 300 && isURLHost(s[h]) {
		h++
	}
	for dot := h - 1; dot > host; dot-- {
		if s[dot] != '.' || dot-host > 256 || dot+1 >= h || !isLower(s[dot+1]) {
			continue
		}
		e := dot + 1
		for e < len(s) && isLower(s[e]) {
			e++
		}
		if port && e+1 < len(s) && s[e] == ':' && s[e+1] >= '0' && s[e+1] <= '9' {
			e++
			for e < len(s) && s[e] >= '0' && s[e] <= '9' {
				e++
			}
		}
		if e < len(s) && (s[e] == '/' || s[e] == '#' || s[e] == '?') {
			e++
			for e < len(s) && isURLPath(s[e]) {
				e++
			}
		}
		return e
	}
	return 0
}

// trimURLEnd drops a bare URL's final dot, its unbalanced closing parentheses, or an entity
// reference at its end.
func trimURLEnd(s string, end int) int {
	switch s[end-1] {
	case '.':
		end--
	case ')':
		closing := 0
		for i := end - 1; i >= 0; i-- {
			if s[i] == ')' {
				closing++
			} else if s[i] == '(' {
				closing--
			}
		}
		if closing > 0 {
			end -= closing
		}
	case ';':
		i := end - 2
		for ; i >= 0 && isASCIIAlnum(s[i]); i-- {
		}
		if i != end-2 && i >= 0 && s[i] == '&' {
			end = i
		}
	}
	return end
}

// bareEmail is the length of the email address at the start of s, or 0.
func bareEmail(s string) int {
	i := 0
	for i < len(s) && isEmailLocal(s[i]) {
		i++
	}
	if i == 0 || i >= len(s) || s[i] != '@' {
		return 0
	}
	at := i
	i++
	// labels of letters, digits and inner hyphens, joined by dots
	start := i
	for {
		l := i
		for i < len(s) && i-l < 63 && (isASCIIAlnum(s[i]) || s[i] == '-') {
			i++
		}
		for i > l && s[i-1] == '-' {
			i--
		}
		if i == l || s[l] == '-' {
			if l > start {
				i = l - 1 // the dot before belongs to no label
			}
			break
		}
		if i+1 < len(s) && s[i] == '.' && isASCIIAlnum(s[i+1]) {
			i++
			continue
		}
		break
	}
	if i <= start || !strings.Contains(s[at:i], ".") {
		return 0
	}
	if s[i-1] == '.' {
		i--
	}
	if i < len(s) && (s[i] == '-' || s[i] == '_') {
		return 0
	}
	return i
}

// taskBox is the length of a task list item's box ("[ ]", "[x]") and the space after it at
// the start of s, or 0.
func taskBox(s string) int {
	if len(s) < 3 || s[0] != '[' || s[2] != ']' || !(s[1] == 'x' || s[1] == 'X' || s[1] != '\n' && isBoxSpace(s[1])) {
		return 0
	}
	i := 3
	for i < len(s) && isBoxSpace(s[i]) {
		i++
	}
	return i
}

func isCodeSpace(c byte) bool { return c == ' ' || c == '\n' }

func isBoxSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// ResolveText is a text node's source as shown: backslash escapes, numeric character
// references and entity names resolved.
func ResolveText(s string) string {
	if !strings.ContainsAny(s, "\\&") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && isASCIIPunct(s[i+1]) {
			b.WriteByte(s[i+1])
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	s = b.String()
	if !strings.Contains(s, "&") {
		return s
	}
	b.Reset()
	for i := 0; i < len(s); i++ {
		if s[i] == '&' {
			if r, n := charRef(s[i:]); n > 0 {
				b.WriteString(r)
				i += n - 1
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// charRef reads a character reference (&#123; &#x7b; &name;) at the start of s: what it
// stands for and its length, 0 if it is none.
func charRef(s string) (string, int) {
	semi := strings.IndexByte(s, ';')
	if semi < 2 || semi > 33 {
		return "", 0
	}
	body := s[1:semi]
	if body[0] == '#' {
		num, base := body[1:], 10
		if num != "" && (num[0] == 'x' || num[0] == 'X') {
			num, base = num[1:], 16
		}
		if num == "" || (base == 10 && len(num) > 7) || (base == 16 && len(num) > 6) {
			return "", 0
		}
		v, err := strconv.ParseUint(num, base, 32)
		if err != nil {
			return "", 0
		}
		r := rune(v)
		if r == 0 || !utf8.ValidRune(r) {
			r = unicode.ReplacementChar
		}
		return string(r), semi + 1
	}
	for i := 0; i < len(body); i++ {
		if !isASCIIAlnum(body[i]) {
			return "", 0
		}
	}
	ref := s[:semi+1]
	v := html.UnescapeString(ref)
	// A name html knows only as the prefix of this one (&notin; as &not, say) is no match.
	if v == ref || (strings.HasSuffix(v, ";") && body != "semi") {
		return "", 0
	}
	return v, semi + 1
}

func isASCIIPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isASCIIAlnum(c byte) bool { return isASCIILetter(c) || c >= '0' && c <= '9' }

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }

func isURLHost(c byte) bool {
	return isASCIIAlnum(c) || strings.IndexByte("-@:%._+~#=", c) >= 0
}

func isURLPath(c byte) bool {
	return isASCIIAlnum(c) || strings.IndexByte("-@:%_+.~#$!?&/=();,'\">^{}[]`", c) >= 0
}

func isMDSpace(r rune) bool { return unicode.IsSpace(r) }

func isMDPunct(r rune) bool {
	if r < 0x80 {
		return isASCIIPunct(byte(r))
	}
	return unicode.IsPunct(r) || unicode.IsSymbol(r)
}
