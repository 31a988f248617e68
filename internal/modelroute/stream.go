package modelroute

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// flushDelay bounds how long a response's bytes may wait for a flush that streamWriter
// skipped: the upstream had more ready, then stalled.
const flushDelay = time.Millisecond

// streamWriter is what the proxy copies a response to. httputil flushes after every write of a
// stream (the body of an event stream or of a response of unknown length); streamWriter skips
// that flush while the upstream has more ready, that is when the read before the write filled
// the copy buffer, and flushes after a read that came back short, or flushDelay after the skipped
// flush should the upstream stall just then. A model's events come in short reads, so each is
// flushed as it comes; a bulk stream leaves in full buffers, without a flush of its own for each
// one: of a full buffer's write the server has already sent all but the chunk's closing CRLF,
// and flushing that alone cost a system call and a wake-up of the sandbox's reader per buffer.
type streamWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	more atomic.Bool // the last read filled the copy buffer

	mu      sync.Mutex // serialises the copying goroutine's writes and the timer's flush
	pending bool       // a flush was skipped
	done    bool       // the handler is returning: the timer must not flush any more
	timer   *time.Timer
}

func newStreamWriter(w http.ResponseWriter) *streamWriter {
	return &streamWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
}

// body wraps the response body the proxy copies from, to see whether each read filled the
// buffer it was given.
func (w *streamWriter) body(rc io.ReadCloser) io.ReadCloser { return &fillReader{ReadCloser: rc, w: w} }

func (w *streamWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController, and so httputil, calls to flush: after each
// write, and once from a goroutine of its own to send the headers.
func (w *streamWriter) FlushError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.more.Load() {
		if !w.pending {
			w.pending = true
			if w.timer == nil {
				w.timer = time.AfterFunc(flushDelay, w.delayedFlush)
			} else {
				w.timer.Reset(flushDelay)
			}
		}
		return nil
	}
	w.pending = false
	return w.rc.Flush()
}

func (w *streamWriter) delayedFlush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending && !w.done {
		w.pending = false
		w.rc.Flush() // an error shows in the copy's next write
	}
}

// stop keeps the timer from flushing once the handler returns: the server then owns the
// connection again. What was written and not flushed goes out as the response ends.
func (w *streamWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// fillReader notes for its streamWriter whether each read filled the buffer it was given.
type fillReader struct {
	io.ReadCloser
	w *streamWriter
}

func (r *fillReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.w.more.Store(n == len(p) && err == nil)
	return n, err
}
