package chat

import (
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/styles"
)

// markdownCorpus is markdown as agents write it, and CommonMark's and GitHub's corners: the
// chat's parser must lay each out as the goldmark-based renderer did, colour on and off.
var markdownCorpus = []string{
	"plain text",
	"a *b* **c** ~~d~~ `e` \\*f\\* &amp; g",
	"one two three four five six seven\n\nnext",
	"one  \ntwo\nthree",
	"one\\\ntwo",
	"# One\n\nSetext\n------",
	"Title\n=====\n\ntext",
	"## Heading with `code` and *emphasis* ##",
	"#NotAHeading",
	"- alpha beta gamma delta\n  - inner\n    1. deep\n- last",
	"1. one\n\n2. two",
	"7) seven\n8) eight",
	"- [ ] open\n- [x] done\n- [X] Done too",
	"```\nif x {\n\tlongword(1)\n}\n```",
	"```go\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n```\n\nafter",
	"~~~\ntilde fence\n~~~",
	"```\nunclosed fence\nstill code",
	"  ```\n  indented fence\n    more\n  ```",
	"text\n\n    code  line\n    second",
	"> quoted words that wrap\n>\n> two",
	"> quote\nlazy continuation",
	"> - list in quote\n> - second",
	"a\n\n---\n\nb",
	"***\n___\n- - -",
	"see [the docs](https://x.dev/d) and <https://go.dev> and https://a.b/c",
	"[https://x.dev](https://x.dev)",
	"![a cat](http://x/c.png)",
	"[link](</my dest> \"title\") and [t](u 'title') and [p](u (title))",
	"[ref] and [text][ref] and [ref][]\n\n[ref]: https://example.com/ref \"Title\"",
	"[not a link] and [x](",
	"| a | bb |\n|---|---:|\n| ccc | 1 |",
	"| k | value |\n|---|---|\n| x | one two three |",
	"| left | center | right |\n|:-----|:------:|------:|\n| a | b | c |\n| longer cell | x | y |",
	"intro line\n| a | b |\n| - | - |\n| 1 | 2 |\n| 3 |\n| 4 | 5 | 6 |",
	"| `a|b` | c \\| d |\n|---|---|\n| **bold** | [l](http://x) |",
	"<div>\nhi\n</div>",
	"<!-- comment -->\ntext",
	"text with <span class=\"x\">inline html</span> here",
	"\n\n   \n",
	"Visit www.example.com/path?q=1. Or http://example.com:8080/a_(b)_c) now.",
	"mail me@example.com, or <me@example.org>.",
	"(https://paren.example.com/x)",
	"*nested **strong** emphasis*",
	"***both***",
	"_under_score_ and snake_case_word and __dunder__",
	"**unclosed bold and *half",
	"a * b * c",
	"~single~ and ~~double~~ and ~~~triple~~~",
	"`` code with ` backtick ``",
	"` spaced `",
	"&copy; &#169; &#xA9; &notanentity; &nbsp;x",
	"\\# not a heading\n\\- not a list",
	"1. item\n\n   continued paragraph\n\n2. next",
	"- a\n- b\n\n- c",
	"- a\n\n  b\n- c",
	"* star\n+ plus\n- minus",
	"10. ten\n11. eleven",
	"paragraph\n1. not a list start? yes it is\n2. two",
	"paragraph\n2. cannot interrupt",
	"- \n  content after empty marker",
	"-\n\n  not in the item",
	"Some text\n***\nMore",
	"The fix:\n\n1. Read `main.go`\n2. Change **line 3**:\n\n   ```go\n   fmt.Println(\"hello\")\n   ```\n\n3. Run `go test ./...`\n\nDone.",
	"I'll check the file first.\n\n```bash\nls -la\ncat README.md | head -n 20\n```\n\nThe output shows:\n\n> the README is short\n\nNext, let me look at `pkg/thing/thing.go`.",
	"## Summary\n\n| File | Change |\n|------|--------|\n| `a.go` | added `Foo()` |\n| `b.go` | removed dead code |\n\n**Note:** tests pass.",
	"Tabs\tinside\ttext and\n\tan indented line",
	"-\tTab after marker\n-\ttwo",
	">\tTab after quote",
	"line ending with backslash\\",
	"trailing spaces   ",
	"a  \n\nb",
	"[a](b) [c]: not a def",
	"![img *alt*](src)",
	"[**bold link**](http://x.dev)",
	"[link with `code`](http://x.dev)",
	"Autolink <ftp://files.example.com/x> and <mailto:a@b.c>",
	"http://example.com/path**bold**",
	"foo_bar_baz and *foo*bar",
	"1) one\n2. switched marker",
	"- a\n * b\n  * c",
	"text\n<div>\nnot html block mid paragraph</div>",
	"<table><tr><td>cell</td></tr></table>\n\nafter",
	"<details>\n<summary>more</summary>\n\nhidden *text*\n</details>",
	"<dd>x\n<hr>\ntext\n\n<ul>\n<li>a</li>\n</ul>",
	"<custom-tag attr=\"v\">\n\nafter",
	"Heading\n---\nSecond\n===",
	"- item\n---",
	"a\n\n\n\nb",
	"> # quoted heading\n> ```\n> code\n> ```",
	"1. a\n   - b\n     - c\n2. d",
	"unicode: café — “quotes” ✓ 日本語のテキスト",
	"**日本語** and *émphasis*",
}

func TestMarkdownMatchesGoldmark(t *testing.T) {
	for _, colour := range []bool{false, true} {
		r := &renderer{st: styles.NewChat(colour)}
		for _, src := range markdownCorpus {
			for _, w := range []int{80, 24} {
				got := strings.Join(r.markdown(src, w), "\n")
				want := strings.Join(r.gmMarkdown(src, w), "\n")
				if got != want {
					t.Errorf("colour %v, width %d, markdown(%q):\n--- got\n%s\n--- goldmark\n%s", colour, w, src, got, want)
				}
			}
		}
	}
}

// The two parsers are known to differ where goldmark departs from CommonMark's reference
// algorithm, none of it what agents write: an empty list item followed by indented lines
// ("*\n  1. x": goldmark ends the item, CommonMark puts the list in it), tabs just after a list
// marker (goldmark keeps a column more), and a table followed by a setext underline.

// FuzzMarkdown feeds the chat's parser anything: it must not panic, and with colour off it
// must write no escape sequence. (The comparison with goldmark is TestMarkdownMatchesGoldmark's,
// on known input: see above for where the two differ.)
func FuzzMarkdown(f *testing.F) {
	for _, src := range markdownCorpus {
		f.Add(src, 40)
	}
	r := &renderer{st: styles.NewChat(false)}
	f.Fuzz(func(t *testing.T, src string, w int) {
		w = 1 + abs(w)%200
		for _, l := range r.markdown(src, w) {
			if strings.ContainsRune(l, '\n') {
				t.Fatalf("markdown(%q, %d): a line holds a line break: %q", src, w, l)
			}
			if strings.Contains(l, "\x1b[") && !strings.Contains(src, "\x1b[") {
				t.Fatalf("markdown(%q, %d): colour off, yet an escape sequence: %q", src, w, l)
			}
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Input built to be slow for a naive parser still parses: deep nesting, long delimiter runs,
// unclosed brackets.
func TestMarkdownPathological(t *testing.T) {
	r := &renderer{st: styles.NewChat(false)}
	for _, src := range []string{
		strings.Repeat("*a ", 5000) + strings.Repeat("b* ", 5000),
		strings.Repeat("[", 5000) + strings.Repeat("a](b)", 5000),
		strings.Repeat("> ", 500) + "deep",
		strings.Repeat("- ", 500) + "deep",
		strings.Repeat("`a``", 2000),
		strings.Repeat("_a", 5000),
		strings.Repeat("<a ", 3000),
		strings.Repeat("![", 3000),
	} {
		if lines := r.markdown(src, 80); len(lines) == 0 {
			t.Errorf("markdown(%.20q...) is empty", src)
		}
	}
}
