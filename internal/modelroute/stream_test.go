package modelroute

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/internal/usage"
)

// A burst larger than the copy buffer, then a pause: the sandbox gets the whole burst while the
// provider holds back the rest, although the route skips the flushes of the full buffers.
func TestStreamBurstThenPause(t *testing.T) {
	events := deltaEvents(3000)
	burst := bytes.Join(events[:len(events)-2], nil)
	if len(burst) <= 2*len(copyBuffers.Get()) {
		t.Fatalf("a burst of %d bytes fills the copy buffer twice at most", len(burst))
	}
	release := make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(burst)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(bytes.Join(events[len(events)-2:], nil))
	})
	resp := e.post(context.Background(), "/anthropic/v1/messages", e.token(testSandbox, Anthropic), `{"stream":true}`)
	defer resp.Body.Close()
	got := readWhileHeld(t, resp.Body, len(burst))
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(append(got, rest...), bytes.Join(events, nil)) {
		t.Fatalf("the stream changed on its way (%v)", err)
	}
	if rec := e.record(); rec.Tokens != (usage.Tokens{Input: 100, Output: 4000}) || rec.Err != "" {
		t.Errorf("record %+v", rec)
	}
}

// readWhileHeld reads the first n bytes of a response whose provider holds back the rest: they
// must come without it.
func readWhileHeld(t *testing.T, body io.Reader, n int) []byte {
	t.Helper()
	got := make([]byte, n)
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(body, got)
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("reading %d bytes while the provider holds the rest: %v", n, err)
		}
	case <-testenv.Deadline(t):
		t.Fatalf("%d bytes sent did not all arrive while the provider held back the rest: the route holds them", n)
	}
	return got
}

// flushCounter is a ResponseWriter that counts its flushes and signals each one.
type flushCounter struct {
	*httptest.ResponseRecorder
	n       atomic.Int32
	flushed chan struct{}
}

func (f *flushCounter) Flush() {
	f.n.Add(1)
	f.flushed <- struct{}{}
}

// A write after a read that came back short is flushed before FlushError returns; one after a
// read that filled the buffer is flushed by the timer when no read follows.
func TestStreamWriterFlushes(t *testing.T) {
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder(), flushed: make(chan struct{}, 4)}
	w := newStreamWriter(rec)
	defer w.stop()
	buf := make([]byte, 30)

	n, _ := w.body(io.NopCloser(bytes.NewReader(make([]byte, 20)))).Read(buf)
	w.Write(buf[:n])
	if err := w.FlushError(); err != nil || rec.n.Load() != 1 {
		t.Fatalf("after a short read: %d flushes, want 1 (%v)", rec.n.Load(), err)
	}
	<-rec.flushed

	n, _ = w.body(io.NopCloser(bytes.NewReader(make([]byte, 40)))).Read(buf)
	w.Write(buf[:n])
	if err := w.FlushError(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rec.flushed:
	case <-testenv.Deadline(t):
		t.Fatal("a write after a full read was never flushed")
	}
	if rec.Body.Len() != 50 {
		t.Errorf("%d bytes written, want 50", rec.Body.Len())
	}
}
