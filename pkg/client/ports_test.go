//go:build unix

package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
)

// portFake answers port streams as sandboxd does, with an echo server as the sandbox's port:
// it takes a handed-off connection (unless old, a daemon from before the handoff) and echoes
// on it, or echoes over the API connection.
type portFake struct {
	old bool
	// hold closes a handed-off connection at once and keeps the lifeline open until its end.
	hold bool
	// asked receives each request's handoff header; took whether a connection came with it.
	asked chan string
	took  chan bool
	// lifelineEnded is closed when a hold's lifeline reached its end.
	lifelineEnded chan struct{}
}

type fakeConnKey struct{}

func (f *portFake) serve(t *testing.T, ln net.Listener) {
	srv := &http.Server{
		Handler: http.HandlerFunc(f.port),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, fakeConnKey{}, c)
		},
	}
	go func() { _ = srv.Serve(handoff.Listen(ln)) }()
	t.Cleanup(func() { srv.Close() })
}

func (f *portFake) port(w http.ResponseWriter, r *http.Request) {
	f.asked <- r.Header.Get(api.PortHandoffHeader)
	var local net.Conn
	if !f.old {
		if files := handoff.Take(r.Context().Value(fakeConnKey{}).(net.Conn)); len(files) == 1 {
			local, _ = net.FileConn(files[0])
			files[0].Close()
		}
	}
	f.took <- local != nil
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	head := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
	if local != nil {
		head += api.PortHandoffHeader + ": " + api.PortHandoffConn + "\r\n"
	}
	_, _ = buf.WriteString(head + "\r\n")
	_ = buf.Flush()
	if local == nil {
		echo(buf.Reader, netcopy.Bare(conn))
		return
	}
	defer local.Close()
	if f.hold {
		local.Close()
		_, _ = io.Copy(io.Discard, conn)
		close(f.lifelineEnded)
		return
	}
	echo(local, local)
}

// echo writes back what it reads until its end, then half-closes.
func echo(r io.Reader, c net.Conn) {
	_, _ = io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{r})
	_ = c.(interface{ CloseWrite() error }).CloseWrite()
}

func newPortFake(old, hold bool) *portFake {
	return &portFake{old: old, hold: hold, asked: make(chan string, 1), took: make(chan bool, 1), lifelineEnded: make(chan struct{})}
}

// unixFake serves f on a unix socket and returns a client of it.
func unixFake(t *testing.T, f *portFake) *Client {
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f.serve(t, ln)
	c, err := New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type forwarded struct {
	handedOff bool
	err       error
}

func forward(ctx context.Context, c *Client, local net.Conn) <-chan forwarded {
	done := make(chan forwarded, 1)
	go func() {
		h, err := c.ForwardPort(ctx, "box", 80, local)
		done <- forwarded{h, err}
	}()
	return done
}

// roundTrip sends data through conn, half-closes, and checks it comes back whole.
func roundTrip(t *testing.T, conn net.Conn, data []byte) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	sent := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		if err == nil {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		sent <- err
	}()
	back, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatalf("%d bytes sent, %d came back, not the same", len(data), len(back))
	}
}

// readEnd reads conn until it ends and returns why (EOF when it closed, an error if data came).
func readEnd(t *testing.T, conn net.Conn) error {
	t.Helper()
	ended := make(chan error, 1)
	go func() {
		n, err := conn.Read(make([]byte, 1))
		if n > 0 {
			err = errors.New("data came")
		}
		ended <- err
	}()
	return testenv.Recv(t, ended, "the connection's end")
}

// TestForwardPortHandsOff: on the unix socket the accepted connection's descriptor goes to the
// daemon with the request; the daemon's copy carries the data both ways, byte-exact, and the
// forward ends when the daemon closes the lifeline.
func TestForwardPortHandsOff(t *testing.T) {
	for _, size := range []int{0, 1, 3<<20 + 7} {
		f := newPortFake(false, false)
		c := unixFake(t, f)
		dialled, accepted := testenv.TCPPair(t)
		done := forward(context.Background(), c, accepted)
		if h := testenv.Recv(t, f.asked, "the request"); h != api.PortHandoffConn {
			t.Fatalf("the request's %s is %q, want %q", api.PortHandoffHeader, h, api.PortHandoffConn)
		}
		if !testenv.Recv(t, f.took, "the handoff") {
			t.Fatal("no connection came with the request")
		}
		data := make([]byte, size)
		_, _ = rand.Read(data)
		roundTrip(t, dialled, data)
		if res := testenv.Recv(t, done, "the forward's end"); !res.handedOff || res.err != nil {
			t.Fatalf("%d bytes: handed off %v, err %v; want true, nil", size, res.handedOff, res.err)
		}
	}
}

// TestForwardPortCancelEndsHandedOff: once the daemon took the connection the client keeps no
// copy of it (the daemon's closing is the connection's end), and the client going away (its ctx
// done) closes the lifeline, which is how the daemon knows to end a forward it carries.
func TestForwardPortCancelEndsHandedOff(t *testing.T) {
	f := newPortFake(false, true)
	c := unixFake(t, f)
	dialled, accepted := testenv.TCPPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := forward(ctx, c, accepted)
	if !testenv.Recv(t, f.took, "the handoff") {
		t.Fatal("no connection came with the request")
	}
	// The fake closed its copy at once: the dialling end sees the end only if the client's
	// copy is closed too.
	if err := readEnd(t, dialled); err != io.EOF {
		t.Fatalf("read %v once the daemon closed its copy; want EOF", err)
	}
	select {
	case <-f.lifelineEnded:
		t.Fatal("the lifeline ended before the client went away")
	case res := <-done:
		t.Fatalf("the forward ended (%v, %v) before the daemon closed the lifeline", res.handedOff, res.err)
	default:
	}
	cancel()
	testenv.Recv(t, f.lifelineEnded, "the lifeline's end")
	if res := testenv.Recv(t, done, "the forward's end"); !res.handedOff {
		t.Fatalf("handed off %v, err %v; want true", res.handedOff, res.err)
	}
}

// TestForwardPortStreams: a daemon that does not take the connection (one from before the
// handoff), or one over TCP, where nothing can be sent along, gets the bytes streamed over the
// API connection as DialPort's, byte-exact with half-closes.
func TestForwardPortStreams(t *testing.T) {
	for _, over := range []string{"an old daemon", "tcp"} {
		f := newPortFake(true, false)
		c := unixFake(t, f)
		if over == "tcp" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			f.serve(t, ln)
			if c, err = New("http://"+ln.Addr().String(), "tok"); err != nil {
				t.Fatal(err)
			}
		}
		for _, size := range []int{0, 1, 3<<20 + 7} {
			dialled, accepted := testenv.TCPPair(t)
			done := forward(context.Background(), c, accepted)
			h := testenv.Recv(t, f.asked, "the request")
			if over == "tcp" && h != "" {
				t.Fatalf("over TCP the request says %s: %q", api.PortHandoffHeader, h)
			}
			testenv.Recv(t, f.took, "the request's handling")
			data := make([]byte, size)
			_, _ = rand.Read(data)
			roundTrip(t, dialled, data)
			if res := testenv.Recv(t, done, "the forward's end"); res.handedOff || res.err != nil {
				t.Fatalf("%s, %d bytes: handed off %v, err %v; want false, nil", over, size, res.handedOff, res.err)
			}
		}
	}
}

// TestForwardPortError: an answer other than 101 is the daemon's error, and the local
// connection is closed.
func TestForwardPortError(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := handoff.Listen(ln).Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				for _, f := range handoff.Take(c) {
					f.Close()
				}
				body := `{"error":{"code":"port_not_listening","message":"nothing listens on port 80"}}`
				_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: "+
					strconv.Itoa(len(body))+"\r\n\r\n"+body)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	c, err := New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	dialled, accepted := testenv.TCPPair(t)
	res := testenv.Recv(t, forward(context.Background(), c, accepted), "the forward's end")
	var apiErr *api.Error
	if !errors.As(res.err, &apiErr) || apiErr.Code != api.CodePortNotListening || res.handedOff {
		t.Fatalf("handed off %v, err %v; want port_not_listening", res.handedOff, res.err)
	}
	if err := readEnd(t, dialled); err != io.EOF {
		t.Fatalf("read %v after the forward failed; want EOF", err)
	}
}
