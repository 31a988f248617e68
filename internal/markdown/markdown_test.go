package markdown

import (
	"reflect"
	"testing"
)

// TestGitHubExtensions checks the trees of the constructs beyond CommonMark that the spec's
// examples do not cover: a table, a task list, strikethrough and a bare link.
func TestGitHubExtensions(t *testing.T) {
	doc := Parse("| a | b |\n|:--|--:|\n| 1 | *2* |\n\n- [x] done\n- [ ] todo\n\n~~gone~~ www.example.com\n")
	if len(doc.Children) != 3 {
		t.Fatalf("want a table, a list and a paragraph, got %d blocks", len(doc.Children))
	}
	table := doc.Children[0]
	if table.Kind != Table || !reflect.DeepEqual(table.Aligns, []Align{AlignLeft, AlignRight}) || len(table.Children) != 2 {
		t.Fatalf("table = %+v", table)
	}
	if head, row := table.Children[0], table.Children[1]; !head.Header || row.Header ||
		toHTMLInlines(head.Children[1]) != "b" || toHTMLInlines(row.Children[1]) != "<em>2</em>" {
		t.Errorf("table rows: header %q, row %q", toHTMLInlines(head.Children[1]), toHTMLInlines(row.Children[1]))
	}
	list := doc.Children[1]
	var boxes []bool
	for _, item := range list.Children {
		if box := item.Children[0].Children[0]; box.Kind == TaskBox {
			boxes = append(boxes, box.Checked)
		}
	}
	if list.Kind != List || !reflect.DeepEqual(boxes, []bool{true, false}) {
		t.Errorf("task list boxes = %v", boxes)
	}
	if got := toHTMLInlines(doc.Children[2]); got != `<del>gone</del> <a href="http://www.example.com">http://www.example.com</a>` {
		t.Errorf("paragraph = %s", got)
	}
}

func toHTMLInlines(n *Node) string {
	var w htmlWriter
	w.inlines(n)
	return w.b.String()
}
