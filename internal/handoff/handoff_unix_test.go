//go:build unix

package handoff

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// serve accepts one connection on a Listen listener, reads n bytes of it and returns it.
func serve(t *testing.T, n int) (addr string, got <-chan net.Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := Listen(ln).Accept()
		if err != nil {
			close(ch)
			return
		}
		_, _ = io.ReadFull(c, make([]byte, n))
		ch <- c
	}()
	return path, ch
}

// TestSendTake: descriptors sent with the first write arrive with the data and are the same
// files; a second Take finds nothing.
func TestSendTake(t *testing.T) {
	addr, got := serve(t, 5)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	c, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !Eligible(w) {
		t.Fatal("a pipe is not eligible")
	}
	if _, err := Send(c, []*os.File{w}).Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	sc := <-got
	defer sc.Close()
	// Under the wrapper is the socket, for copies that splice once a handler took the files.
	if _, ok := sc.(interface{ NetConn() net.Conn }).NetConn().(*net.UnixConn); !ok {
		t.Fatal("the wrapper does not give the socket under it")
	}
	files := Take(sc)
	if len(files) != 1 {
		t.Fatalf("took %d files, want 1", len(files))
	}
	if _, err := files[0].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	files[0].Close()
	b := make([]byte, 1)
	if _, err := r.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("the received descriptor is not the pipe: %q, %v", b, err)
	}
	if more := Take(sc); more != nil {
		t.Fatalf("a second Take found %d files", len(more))
	}
}

// TestAtMost: a client sending more than MaxFiles gets MaxFiles kept, the rest closed.
func TestAtMost(t *testing.T) {
	addr, got := serve(t, 1)
	var files []*os.File
	for range MaxFiles + 2 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	c, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := Send(c, files).Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	sc := <-got
	defer sc.Close()
	took := Take(sc)
	for _, f := range took {
		f.Close()
	}
	if len(took) != MaxFiles {
		t.Fatalf("took %d files, want %d", len(took), MaxFiles)
	}
}

// TestEligible: a terminal-less device other than /dev/null, and a directory, are not.
func TestEligible(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	if !Eligible(null) || Eligible(dir) || Eligible(zero) {
		t.Fatalf("eligible: /dev/null %v (want true), a directory %v, /dev/zero %v (want false)", Eligible(null), Eligible(dir), Eligible(zero))
	}
}

// TestReadErrorCount: a blocked read cut short (here by a deadline set while it waits, as
// http.Server and websocket cut theirs) returns a count of zero, never recvmsg's -1, which a
// bufio.Reader panics at.
func TestReadErrorCount(t *testing.T) {
	addr, got := serve(t, 0)
	c, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := <-got
	defer sc.Close()
	cut := time.AfterFunc(50*time.Millisecond, func() { _ = sc.SetReadDeadline(time.Now()) })
	defer cut.Stop()
	n, err := sc.Read(make([]byte, 8))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: n=%d, err %v; want 0 and a deadline error", n, err)
	}
}
