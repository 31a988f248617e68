package netcopy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
)

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return c, <-accepted
}

// A request, its half-close, then the answer: both directions arrive whole, and each end sees
// the other's end of sending (a server reading until EOF before it answers still answers).
func TestJoinCarriesBothWaysWithHalfClose(t *testing.T) {
	client, proxyIn := pair(t)
	proxyOut, server := pair(t)
	done := make(chan [2]int64, 1)
	go func() {
		up, down, err := Join(proxyIn, proxyOut)
		if err != nil {
			t.Errorf("Join: %v", err)
		}
		done <- [2]int64{up, down}
	}()
	request := bytes.Repeat([]byte("q"), 3<<20)
	go func() {
		client.Write(request)
		client.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(server) // until the client's half-close arrives
	if err != nil || !bytes.Equal(got, request) {
		t.Fatalf("server read %d bytes, %v; want %d", len(got), err, len(request))
	}
	server.Write([]byte("answer"))
	server.Close()
	answer, err := io.ReadAll(client)
	if err != nil || string(answer) != "answer" {
		t.Fatalf("client read %q, %v", answer, err)
	}
	if n := <-done; n != [2]int64{int64(len(request)), 6} {
		t.Errorf("Join copied %v, want [%d 6]", n, len(request))
	}
}

// wrapped is a connection wrapper of the kind listeners add, which Go's copies do not know.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// Bare finds the socket under any number of wrappers, so that a copy can splice and a unix
// socket's buffer can be widened; a bare socket is itself.
func TestBare(t *testing.T) {
	a, b := pair(t)
	defer a.Close()
	defer b.Close()
	if got := Bare(wrapped{wrapped{a}}); got != a {
		t.Fatalf("Bare of a twice-wrapped socket is %T, want the socket", got)
	}
	if got := Bare(a); got != a {
		t.Fatalf("Bare of a socket is %T, want the socket", got)
	}
	// Under TLS the socket carries records: a copy to it would send the data in clear.
	tc := tls.Client(wrapped{a}, &tls.Config{})
	if got := Bare(wrapped{tc}); got != tc {
		t.Fatalf("Bare of a wrapped TLS connection is %T, want the TLS connection", got)
	}
}
