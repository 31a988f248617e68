package lockedwriter

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// A bytes.Buffer written from several goroutines at once is a data race (go test -race) and
// can lose or tear writes; through a Writer every write arrives whole.
func TestConcurrentWritesArriveWhole(t *testing.T) {
	var buf bytes.Buffer
	w := New(&buf)
	const writers, writes = 8, 200
	var wg sync.WaitGroup
	for i := range writers {
		line := strings.Repeat(string(rune('a'+i)), 64) + "\n"
		wg.Go(func() {
			for range writes {
				if _, err := w.Write([]byte(line)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != writers*writes {
		t.Fatalf("%d lines, want %d", len(lines), writers*writes)
	}
	for _, l := range lines {
		if len(l) != 64 || strings.Count(l, l[:1]) != 64 {
			t.Fatalf("torn write: %q", l)
		}
	}
}
