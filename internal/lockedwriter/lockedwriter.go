// Package lockedwriter lets several goroutines write to one io.Writer a whole Write at a time:
// a build step's stdout and stderr into its log in the daemon, a turn's output and the Ctrl-C
// handler onto the CLI's stderr. It is a leaf that builds on every OS, so both may import it.
package lockedwriter

import (
	"io"
	"sync"
)

// Writer passes each Write to the writer it wraps while holding a lock, so concurrent writes
// never interleave within one another.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// New returns a Writer writing to w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p to the wrapped writer, after any Write already in progress.
func (l *Writer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
