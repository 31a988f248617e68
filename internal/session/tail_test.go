package session

import (
	"strings"
	"testing"
)

func TestTailWriterKeepsTheLastLines(t *testing.T) {
	var tw tailWriter
	for i := range 1000 {
		_, _ = tw.Write([]byte(strings.Repeat("x", i%7) + " noise\n"))
	}
	_, _ = tw.Write([]byte("Error: cannot find module 'foo'\n\n   at load (x.js:1)\n"))
	if got, want := tw.String(), "Error: cannot find module 'foo' | at load (x.js:1)"; !strings.HasSuffix(got, want) {
		t.Errorf("tail = %q, want it to end with %q", got, want)
	}
	if got := tw.String(); len(got) > tailBytes+len(" | ")*4+len("…") {
		t.Errorf("tail is %d bytes, more than the bound", len(got))
	}
	var long tailWriter
	_, _ = long.Write([]byte(strings.Repeat("é", 2000)))
	if got := long.String(); !strings.HasPrefix(got, "…") || !strings.HasSuffix(got, "é") || len(got) > tailBytes+len("…") {
		t.Errorf("one long line: %d bytes %q…", len(got), got[:20])
	}
}
