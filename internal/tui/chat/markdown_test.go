package chat

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/hiloop/hiloop/internal/styles"
)

func TestMarkdownPlain(t *testing.T) {
	tests := []struct {
		name string
		w    int
		src  string
		want string
	}{
		{"emphasis keeps its delimiters", 40, "a *b* **c** ~~d~~ `e` \\*f\\* &amp; g",
			"a *b* **c** ~~d~~ e *f* & g"},
		{"paragraphs wrap", 20, "one two three four five six seven\n\nnext",
			"one two three four\nfive six seven\n\nnext"},
		{"hard break", 40, "one  \ntwo\nthree", "one\ntwo three"},
		{"headings", 40, "# One\n\nSetext\n------", "# One\n\n## Setext"},
		{"tight nested list hangs its lines", 20, "- alpha beta gamma delta\n  - inner\n    1. deep\n- last",
			"• alpha beta gamma\n  delta\n  • inner\n    1. deep\n• last"},
		{"loose list", 40, "1. one\n\n2. two", "1. one\n\n2. two"},
		{"ordered list keeps its start and marker", 40, "7) seven\n8) eight", "7) seven\n8) eight"},
		{"task list", 40, "- [ ] open\n- [x] done", "[ ] open\n[x] done"},
		{"code keeps its spaces and is cut, indented", 12, "```\nif x {\n\tlongword(1)\n}\n```",
			"  if x {\n      longwo\n  rd(1)\n  }"},
		{"indented code", 40, "text\n\n    code  line", "text\n\n  code  line"},
		{"quote", 20, "> quoted words that wrap\n>\n> two", "│ quoted words that\n│ wrap\n│\n│ two"},
		{"rule", 40, "a\n\n---\n\nb", "a\n\n--------\n\nb"},
		{"link shows text and address", 80, "see [the docs](https://x.dev/d) and <https://go.dev> and https://a.b/c",
			"see the docs https://x.dev/d and https://go.dev and https://a.b/c"},
		{"link whose text is its address shows once", 80, "[https://x.dev](https://x.dev)", "https://x.dev"},
		{"image", 80, "![a cat](http://x/c.png)", "Image: a cat → http://x/c.png"},
		{"table", 40, "| a | bb |\n|---|---:|\n| ccc | 1 |", "a   │ bb\n────┼───\nccc │  1"},
		{"table shrinks its widest column", 16, "| k | value |\n|---|---|\n| x | one two three |",
			"k │ value\n──┼" + strings.Repeat("─", 13) + "\nx │ one two\n  │ three"},
		{"html block stays raw", 40, "<div>\nhi\n</div>", "<div>\nhi\n</div>"},
		{"blank edges trimmed", 40, "\n\n   \n", ""},
	}
	r := &renderer{st: styles.NewChat(false)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(r.markdown(tt.src, tt.w), "\n")
			if got != tt.want {
				t.Errorf("markdown(%q, %d):\n--- got\n%s\n--- want\n%s", tt.src, tt.w, got, tt.want)
			}
		})
	}
}

// A line with colour on must carry its styles alone: the screen puts lines next to other
// things, so no span may run on from the line before.
func TestMarkdownColourLinesStandAlone(t *testing.T) {
	r := &renderer{st: styles.NewChat(true)}
	src := "# Title\n\nsome **strong words that go on and on** and *emphasised ones too* then `code spans` " +
		"and [a link](https://example.com/a/long/path)\n\n```\ncode\n```\n\n> quote\n\n| h | i |\n|---|---|\n| 1 | 2 |\n"
	lines := r.markdown(src, 24)
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, "\x1b[") {
		t.Fatalf("colour on, yet no escape sequence:\n%q", joined)
	}
	if strings.Contains(ansi.Strip(joined), "**") || strings.Contains(ansi.Strip(joined), "*emph") {
		t.Errorf("colour on, yet emphasis keeps its delimiters:\n%s", ansi.Strip(joined))
	}
	for _, l := range lines {
		if sgr := gmLastSGR(l); sgr != "" && sgr != "\x1b[m" {
			t.Errorf("line %q leaves a style open", l)
		}
		if w := ansi.StringWidth(l); w > 24 {
			t.Errorf("line %q is %d columns wide, want at most 24", ansi.Strip(l), w)
		}
	}
}
