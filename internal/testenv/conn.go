package testenv

import (
	"net"
	"testing"
)

// Recv returns the next value sent on ch, and fails the test, naming what it waited for, if
// none comes before Deadline.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-Deadline(t):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// TCPPair returns both ends of a new loopback TCP connection, the one dialled and the one
// accepted; both are closed when the test ends.
func TCPPair(t testing.TB) (dialled, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if dialled, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if accepted, err = ln.Accept(); err != nil {
		dialled.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dialled.Close(); accepted.Close() })
	return dialled, accepted
}
