package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestTakePortConn: the daemon takes one stream socket announced by the header, and closes
// anything else that came (a pipe, a datagram socket, two descriptors, one not announced),
// leaving no descriptor open.
func TestTakePortConn(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	ln := handoff.Listen(uln)
	// take sends files with one byte and returns what takePortConn makes of them.
	take := func(files []*os.File, header string) net.Conn {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		if _, err := handoff.Send(c, files).Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(sc, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/v1/sandboxes/box/ports/80", nil)
		if header != "" {
			r.Header.Set(api.PortHandoffHeader, header)
		}
		return takePortConn(r.WithContext(withConn(context.Background(), sc)))
	}
	file := func(c interface{ File() (*os.File, error) }) *os.File {
		f, err := c.File()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	_, accepted := testenv.TCPPair(t)
	tcp := file(accepted.(*net.TCPConn))
	defer tcp.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	udpFile := file(udp.(*net.UDPConn))
	defer udpFile.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()

	base := openFDs(t)
	for _, c := range []struct {
		name   string
		files  []*os.File
		header string
	}{
		{"a TCP connection not announced", []*os.File{tcp}, ""},
		{"a TCP connection under another name", []*os.File{tcp}, "stdout"},
		{"a pipe", []*os.File{pw}, api.PortHandoffConn},
		{"a datagram socket", []*os.File{udpFile}, api.PortHandoffConn},
		{"two connections", []*os.File{tcp, tcp}, api.PortHandoffConn},
	} {
		if got := take(c.files, c.header); got != nil {
			got.Close()
			t.Errorf("%s: taken", c.name)
		}
		if n := openFDs(t); n != base {
			t.Errorf("%s: %d descriptors open after, %d before", c.name, n, base)
		}
	}
	got := take([]*os.File{tcp}, api.PortHandoffConn)
	if got == nil {
		t.Fatal("a TCP connection announced by the header was not taken")
	}
	if _, ok := got.(*net.TCPConn); !ok {
		t.Errorf("the connection taken is a %T, want *net.TCPConn", got)
	}
	got.Close()
	if n := openFDs(t); n != base {
		t.Errorf("a TCP connection taken and closed: %d descriptors open after, %d before", n, base)
	}
}

// readAll reads c to its end in the background.
func readAll(c net.Conn) <-chan []byte {
	ch := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(c)
		ch <- b
	}()
	return ch
}

// TestJoinHandedOff: a handed-off connection and the port's carry data both ways, byte-exact,
// each half-close passed on; when both directions have ended, the lifeline is closed. The
// client closing the lifeline instead ends both connections.
func TestJoinHandedOff(t *testing.T) {
	for _, ending := range []string{"both directions end", "the client goes away"} {
		client, local := testenv.TCPPair(t)
		sandbox, upstream := testenv.TCPPair(t)
		cliEnd, lifeline := net.Pipe()
		t.Cleanup(func() { cliEnd.Close() })
		joined := make(chan struct{})
		go func() {
			defer close(joined)
			joinHandedOff(local, upstream, lifeline)
		}()
		lifelineEnd := make(chan error, 1)
		go func() {
			_, err := cliEnd.Read(make([]byte, 1))
			lifelineEnd <- err
		}()
		if ending == "the client goes away" {
			cliEnd.Close()
			testenv.Recv(t, joined, "the join's end")
			if b := testenv.Recv(t, readAll(client), "the client's end"); len(b) != 0 {
				t.Fatalf("the client read %d bytes", len(b))
			}
			if b := testenv.Recv(t, readAll(sandbox), "the sandbox's end"); len(b) != 0 {
				t.Fatalf("the sandbox read %d bytes", len(b))
			}
			continue
		}
		up, down := make([]byte, 2<<20+3), make([]byte, 1)
		_, _ = rand.Read(up)
		_, _ = rand.Read(down)
		toSandbox, toClient := readAll(sandbox), readAll(client)
		for _, w := range []struct {
			c    net.Conn
			data []byte
		}{{client, up}, {sandbox, down}} {
			if _, err := w.c.Write(w.data); err != nil {
				t.Fatal(err)
			}
			if err := w.c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
		}
		if b := testenv.Recv(t, toSandbox, "the sandbox's data"); !bytes.Equal(b, up) {
			t.Fatalf("the sandbox got %d bytes of %d, not the same", len(b), len(up))
		}
		if b := testenv.Recv(t, toClient, "the client's data"); !bytes.Equal(b, down) {
			t.Fatalf("the client got %q, want %q", b, down)
		}
		if err := testenv.Recv(t, lifelineEnd, "the lifeline's end"); !errors.Is(err, io.EOF) {
			t.Fatalf("the lifeline ended with %v, want EOF", err)
		}
		testenv.Recv(t, joined, "the join's end")
	}
}
