package splice

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pipe returns a pipe whose ends are non-blocking and in the runtime's poller.
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPipeToPipe moves data of several sizes, byte-exact, through a reader slower than the
// writer (the copy waits on a full destination as well as an empty source).
func TestPipeToPipe(t *testing.T) {
	for _, n := range []int{0, 1, 3<<20 + 7} {
		data := random(t, n)
		srcR, srcW := pipe(t)
		dstR, dstW := pipe(t)
		go func() {
			_, _ = srcW.Write(data)
			srcW.Close()
		}()
		got := make(chan []byte, 1)
		go func() {
			var buf bytes.Buffer
			p := make([]byte, 4096)
			for {
				time.Sleep(10 * time.Microsecond)
				k, err := dstR.Read(p)
				buf.Write(p[:k])
				if err != nil {
					break
				}
			}
			got <- buf.Bytes()
		}()
		moved, err := Copy(dstW, srcR, nil)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		dstW.Close()
		if b := <-got; moved != int64(n) || !bytes.Equal(b, data) {
			t.Fatalf("%d bytes: moved %d, received %d, equal %v", n, moved, len(b), bytes.Equal(b, data))
		}
	}
}

// TestFiles: from a regular file into a pipe, and from a pipe into a file opened O_APPEND,
// where splice does not apply and the copy goes through a buffer.
func TestFiles(t *testing.T) {
	data := random(t, 2<<20+3)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("head"), 0o600); err != nil {
		t.Fatal(err)
	}
	srcR, srcW := pipe(t)
	go func() {
		_, _ = srcW.Write(data)
		srcW.Close()
	}()
	app, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if n, err := Copy(app, srcR, nil); err != nil || n != int64(len(data)) {
		t.Fatalf("into an O_APPEND file: %d, %v", n, err)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Equal(b, append([]byte("head"), data...)) {
		t.Fatalf("the appended file differs (%d bytes)", len(b))
	}

	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dstR, dstW := pipe(t)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(dstR)
		got <- b
	}()
	if n, err := Copy(dstW, in, nil); err != nil || n != int64(len(b)) {
		t.Fatalf("out of a file: %d, %v", n, err)
	}
	dstW.Close()
	if g := <-got; !bytes.Equal(g, b) {
		t.Fatalf("out of a file: got %d bytes, want %d", len(g), len(b))
	}
}

// TestDrained: once drained says so, an empty source ends the copy although its writer is
// still there; a read deadline wakes a copy waiting on it to ask.
func TestDrained(t *testing.T) {
	srcR, srcW := pipe(t)
	_, dstW := pipe(t)
	if _, err := srcW.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	var drained atomic.Bool
	done := make(chan error, 1)
	var n int64
	go func() {
		var err error
		n, err = Copy(dstW, srcR, drained.Load)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the copy ended before it was drained: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	drained.Store(true)
	_ = srcR.SetReadDeadline(time.Now())
	if err := <-done; err != nil || n != 3 {
		t.Fatalf("drained copy: %d bytes, %v; want 3, nil", n, err)
	}
}

// TestWriteDeadline: a copy held up by a destination nobody reads ends at its write deadline.
func TestWriteDeadline(t *testing.T) {
	srcR, srcW := pipe(t)
	_, dstW := pipe(t)
	go func() {
		_, _ = srcW.Write(make([]byte, 4<<20))
	}()
	done := make(chan error, 1)
	go func() {
		_, err := Copy(dstW, srcR, nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	_ = dstW.SetWriteDeadline(time.Now())
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
}
