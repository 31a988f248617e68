package usage

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// The retention docs/architecture.md gives is the one the store keeps.
func TestDocsGiveTheRetention(t *testing.T) {
	b, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	n := strconv.Itoa(MaxRecords)
	for i := len(n) - 3; i > 0; i -= 3 {
		n = n[:i] + "," + n[i:]
	}
	if want := "the newest " + n + " records"; !strings.Contains(string(b), want) {
		t.Errorf("docs/architecture.md does not say %q", want)
	}
}
