package egresslog

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// thousands writes n as the docs do: 10000 → "10,000".
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// The bounds the docs give are the ones the log keeps.
func TestDocsGiveTheBounds(t *testing.T) {
	read := func(doc string) string {
		b, err := os.ReadFile("../../docs/" + doc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, doc := range []string{"operations.md", "api.md", "cli.md"} {
		if want := thousands(MaxRecords) + " records per sandbox"; !strings.Contains(read(doc), want) {
			t.Errorf("docs/%s does not say %q", doc, want)
		}
	}
	if want := thousands(QueueSize) + " records are queued"; !strings.Contains(read("operations.md"), want) {
		t.Errorf("docs/operations.md does not say %q", want)
	}
	if want := "If the queue (" + thousands(QueueSize) + " records)"; !strings.Contains(read("api.md"), want) {
		t.Errorf("docs/api.md does not say %q", want)
	}
}
