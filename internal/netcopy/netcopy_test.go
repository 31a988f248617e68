package netcopy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"testing"
	"time"
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

// tlsPair returns both ends of a TLS connection over loopback TCP, each over ReadBuffered as
// hiloop's client and daemon make them, with a certificate made for the test.
func tlsPair(t *testing.T) (client, server *tls.Conn) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	a, b := pair(t)
	client = tls.Client(ReadBuffered(a), &tls.Config{InsecureSkipVerify: true}) // the test's own server
	server = tls.Server(ReadBuffered(b), &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	errs := make(chan error, 1)
	go func() { errs <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return client, server
}

// pattern is n bytes that differ from one position to the next, so that data reordered,
// dropped or repeated does not compare equal.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>11)
	}
	return b
}

// Through TLS, in writes of every size (many records arriving at once, which the copy takes
// together, and single small ones), both directions arrive whole and in order, and each end
// sees the other's half-close.
func TestJoinCarriesTLSBothWays(t *testing.T) {
	tlsClient, tlsServer := tlsPair(t)
	proxyOut, plain := pair(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := Join(tlsServer, proxyOut)
		done <- err
	}()
	up, down := pattern(9<<20+123), pattern(7<<20+45)
	go func() {
		for rest, size := up, 1; len(rest) > 0; size = size*3 + 1 {
			n := min(len(rest), size%(1<<20))
			tlsClient.Write(rest[:n])
			rest = rest[n:]
		}
		tlsClient.CloseWrite()
	}()
	go func() {
		plain.Write(down)
		plain.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(plain)
	if err != nil || !bytes.Equal(got, up) {
		t.Fatalf("the plain end read %d bytes, %v; want the %d sent", len(got), err, len(up))
	}
	got, err = io.ReadAll(tlsClient)
	if err != nil || !bytes.Equal(got, down) {
		t.Fatalf("the TLS end read %d bytes, %v; want the %d sent", len(got), err, len(down))
	}
	if err := <-done; err != nil {
		t.Fatalf("Join: %v", err)
	}
}

// A few bytes through TLS reach the other end while the sender sends nothing more: the copy
// takes what has arrived, and never waits for more to fill its buffer.
func TestJoinFromTLSDoesNotWaitForMore(t *testing.T) {
	tlsClient, tlsServer := tlsPair(t)
	proxyOut, plain := pair(t)
	defer tlsClient.Close()
	defer plain.Close()
	go Join(tlsServer, proxyOut)
	for _, msg := range []string{"ping", "a second line\n", "x"} {
		if _, err := tlsClient.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(plain, got); err != nil || string(got) != msg {
			t.Fatalf("read %q, %v; want %q", got, err, msg)
		}
	}
}

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes++
	return c.Conn.Write(p)
}

// A held TLS write reaches the socket in a few large writes instead of one per record, all of
// it, and in order; a write without a hold goes straight out.
func TestHoldWritesGathersRecords(t *testing.T) {
	a, b := pair(t)
	counted := &countingConn{Conn: a}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	server := tls.Server(ReadBuffered(counted), &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	client := tls.Client(ReadBuffered(b), &tls.Config{InsecureSkipVerify: true}) // the test's own server
	defer server.Close()
	defer client.Close()
	errs := make(chan error, 1)
	go func() { errs <- client.Handshake() }()
	if err := server.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	data := pattern(1 << 20)
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(data)+5)
		_, err := io.ReadFull(client, b)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	before := counted.writes
	release := HoldWrites(server)
	if _, err := server.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	// 64 records of 16 KiB, gathered up to holdBuffer a write.
	if n := counted.writes - before; n > len(data)/(holdBuffer-maxRecord)+1 {
		t.Errorf("a held 1 MiB write reached the socket in %d writes", n)
	}
	before = counted.writes
	if _, err := server.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	if n := counted.writes - before; n != 1 {
		t.Errorf("a write without a hold reached the socket in %d writes, want 1", n)
	}
	b2 := <-got
	if !bytes.Equal(b2[:len(data)], data) || string(b2[len(data):]) != "after" {
		t.Fatal("the peer read other bytes than were written")
	}
}
