//go:build linux

package gateway

import (
	"net"
	"net/netip"
	"testing"

	"github.com/hiloop/hiloop/internal/testenv"
)

// On the host nothing is redirected: the original destination of a plain loopback
// connection is where it arrived, whether or not the host tracks connections.
func TestOriginalDstNotRedirected(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				testenv.Unavailable(t, "no %s on this host: %v", addr, err)
			}
			defer l.Close()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s := accept(t, l)
			got, err := OriginalDst(s)
			if err != nil {
				t.Fatal(err)
			}
			if want := addrPort(l.Addr()); got != want {
				t.Errorf("OriginalDst = %v, want the listener's %v", got, want)
			}
		})
	}
}

func TestOriginalDstNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got, err := OriginalDst(a); err == nil {
		t.Errorf("OriginalDst of a pipe = %v, want an error", got)
	}
}

// await returns what fn returns, or fails the test when it never does.
func await[T any](t *testing.T, what string, fn func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-testenv.Deadline(t):
		t.Fatalf("%s: nothing happened before the test's deadline", what)
		panic("unreachable")
	}
}

func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := await(t, "accept on "+l.Addr().String(), l.Accept)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
