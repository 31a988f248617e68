package gateway

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// chunkConn serves data in reads of at most chunk bytes; once data is used up it reports a
// timeout (a client that stalls) or EOF (a client that closed its side).
type chunkConn struct {
	data  []byte
	chunk int
	stall bool
	read  int
}

func (c *chunkConn) Read(b []byte) (int, error) {
	if len(c.data) == 0 {
		if c.stall {
			return 0, os.ErrDeadlineExceeded
		}
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), c.chunk)], c.data)
	c.data = c.data[n:]
	c.read += n
	return n, nil
}

func (c *chunkConn) SetReadDeadline(time.Time) error { return nil }

// recordedConn is the client side of a connection that keeps what the client writes and
// fails the write, so a TLS handshake stops after the ClientHello.
type recordedConn struct {
	net.Conn
	buf bytes.Buffer
}

func (c *recordedConn) Write(b []byte) (int, error) {
	c.buf.Write(b)
	return 0, errors.New("recorded")
}
func (c *recordedConn) Read([]byte) (int, error) { return 0, io.EOF }
func (c *recordedConn) Close() error             { return nil }

// clientHello is the ClientHello Go's TLS client sends for serverName.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	rc := &recordedConn{}
	tls.Client(rc, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""}).Handshake()
	if rc.buf.Len() == 0 || rc.buf.Bytes()[0] != 0x16 {
		t.Fatalf("no ClientHello recorded: %x", rc.buf.Bytes())
	}
	return rc.buf.Bytes()
}

// echConfigList is an ECHConfigList (TLS Encrypted Client Hello, version 0xfe0d) with one
// configuration whose public name, the cover name a client puts in its outer SNI, is
// publicName; no server holds its key.
func echConfigList(t testing.TB, publicName string) []byte {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(extECH) // the configuration's version
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			b.AddUint8(7)       // config_id
			b.AddUint16(0x0020) // DHKEM(X25519, HKDF-SHA256)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(key.PublicKey().Bytes()) })
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
				b.AddUint16(0x0001) // HKDF-SHA256
				b.AddUint16(0x0001) // AES-128-GCM
			})
			b.AddUint8(0) // maximum_name_length
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(publicName)) })
			b.AddUint16(0) // no extensions
		})
	})
	return b.BytesOrPanic()
}

// echConfig is a client configuration that sends serverName encrypted, behind publicName.
func echConfig(t testing.TB, serverName, publicName string) *tls.Config {
	return &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS13, EncryptedClientHelloConfigList: echConfigList(t, publicName)}
}

// echHello is the ClientHello Go's TLS client sends for serverName with ECH, behind publicName.
func echHello(t testing.TB, serverName, publicName string) []byte {
	t.Helper()
	rc := &recordedConn{}
	tls.Client(rc, echConfig(t, serverName, publicName)).Handshake()
	if rc.buf.Len() == 0 || rc.buf.Bytes()[0] != 0x16 {
		t.Fatalf("no ClientHello recorded: %x", rc.buf.Bytes())
	}
	return rc.buf.Bytes()
}

// A ClientHello with encrypted_client_hello names its cover host in the SNI: sniff says so.
func TestSniffECH(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		host string
		ech  bool
	}{
		{"plain", clientHello(t, "api.example.test"), "api.example.test", false},
		{"ech", echHello(t, "hidden.example.test", "cover.example.test"), "cover.example.test", true},
		{"ech in small records", reframe(t, echHello(t, "hidden.example.test", "Cover.Example.Test"), 50), "cover.example.test", true},
	} {
		h, err := sniff(&chunkConn{data: tc.data, chunk: 1 << 20}, time.Second, time.Second)
		if err != nil || h.kind != KindTLS || h.host != tc.host || h.ech != tc.ech {
			t.Errorf("%s: kind %q host %q ech %v (%v), want tls %q ech %v", tc.name, h.kind, h.host, h.ech, err, tc.host, tc.ech)
		}
	}
}

// reframe splits the handshake messages of a record stream into records of at most n bytes.
func reframe(t testing.TB, records []byte, n int) []byte {
	t.Helper()
	var msg []byte
	for len(records) > 0 {
		size := int(records[3])<<8 | int(records[4])
		msg = append(msg, records[5:5+size]...)
		records = records[5+size:]
	}
	var out []byte
	for len(msg) > 0 {
		k := min(n, len(msg))
		out = append(out, 0x16, 3, 1, byte(k>>8), byte(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

func TestSniff(t *testing.T) {
	sni := clientHello(t, "API.Example.Test.")
	noSNI := clientHello(t, "")
	bigHead := "GET / HTTP/1.1\r\nHost: a.test\r\nX: " + strings.Repeat("x", maxHead) + "\r\n\r\n"
	tests := []struct {
		name   string
		data   []byte
		stall  bool
		kind   string
		host   string
		status int // a *headError with this status; -1 for one without (TLS)
		head   int // bytes expected in head; -1 = all of data when read at once
	}{
		{name: "tls sni", data: sni, kind: KindTLS, host: "api.example.test", head: -1},
		{name: "tls sni and early bytes", data: append(append([]byte{}, sni...), 0x17, 3, 3, 0, 1, 'x'), kind: KindTLS, host: "api.example.test", head: -1},
		{name: "tls records of 1 byte", data: reframe(t, sni, 1), kind: KindTLS, host: "api.example.test", head: -1},
		{name: "tls records of 100 bytes", data: reframe(t, sni, 100), kind: KindTLS, host: "api.example.test", head: -1},
		{name: "tls no sni", data: noSNI, kind: KindTLS, host: "", head: -1},
		{name: "tls truncated then closed", data: sni[:40], kind: KindTCP, head: -1},
		{name: "tls truncated then stalled", data: sni[:40], stall: true, kind: KindTLS, status: -1, head: -1},
		{name: "tls record of alert", data: []byte{0x16, 3, 1, 0, 4, 2, 0, 0, 0}, kind: KindTCP, head: -1},
		{name: "tls bad version", data: []byte{0x16, 9, 9, 0, 4, 1, 0, 0, 0}, kind: KindTCP, head: -1},
		{name: "http host", data: []byte("GET /x HTTP/1.1\r\nHost: Web.Example.Test:8080\r\n\r\nbody"), kind: KindHTTP, host: "web.example.test", head: -1},
		{name: "http bare lf", data: []byte("POST /x HTTP/1.0\nHost: web.example.test\n\n"), kind: KindHTTP, host: "web.example.test", head: -1},
		{name: "http absolute", data: []byte("GET http://abs.example.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n"), kind: KindHTTP, host: "abs.example.test", head: -1},
		{name: "http address host", data: []byte("GET / HTTP/1.1\r\nHost: [::ffff:10.0.0.1]:80\r\n\r\n"), kind: KindHTTP, host: "10.0.0.1", head: -1},
		{name: "http no host", data: []byte("GET / HTTP/1.0\r\n\r\n"), kind: KindHTTP, host: "", head: -1},
		{name: "http bad host", data: []byte("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), kind: KindHTTP, status: http.StatusBadRequest, head: -1},
		{name: "http malformed header", data: []byte("GET / HTTP/1.1\r\nHost: a.test\r\nno colon\r\n\r\n"), kind: KindHTTP, status: http.StatusBadRequest, head: -1},
		{name: "http slow head", data: []byte("GET / HTTP/1.1\r\nHost: a.te"), stall: true, kind: KindHTTP, status: http.StatusRequestTimeout, head: -1},
		{name: "http head cut", data: []byte("GET / HTTP/1.1\r\nHost: a.te"), kind: KindHTTP, status: http.StatusBadRequest, head: -1},
		{name: "http head too big", data: []byte(bigHead), kind: KindHTTP, status: http.StatusRequestHeaderFieldsTooLarge, head: maxHead},
		{name: "ssh banner", data: []byte("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"), kind: KindTCP, head: -1},
		{name: "http/2 preface", data: []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), kind: KindTCP, head: -1},
		{name: "letters without newline, stalled", data: []byte("HELO"), stall: true, kind: KindTCP, head: -1},
		{name: "one letter, stalled", data: []byte("x"), stall: true, kind: KindTCP, head: -1},
		{name: "request line without its end, stalled", data: []byte("GET /index.html HTTP/1.1"), stall: true, kind: KindTCP, head: -1},
		{name: "tls header start, stalled", data: []byte{0x16, 3}, stall: true, kind: KindTCP, head: -1},
		{name: "binary", data: []byte{0, 0, 0, 8, 4, 210, 22, 47}, kind: KindTCP, head: -1},
		{name: "server speaks first", stall: true, kind: KindTCP, head: 0},
		{name: "closed at once", kind: KindTCP, head: 0},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 3, 1 << 20} {
			c := &chunkConn{data: tt.data, chunk: chunk, stall: tt.stall}
			h, err := sniff(c, time.Second, time.Second)
			var he *headError
			switch {
			case tt.status == 0 && err != nil:
				t.Errorf("%s/%d: error %v", tt.name, chunk, err)
			case tt.status != 0 && !errors.As(err, &he):
				t.Errorf("%s/%d: error %v, want a head error", tt.name, chunk, err)
			case tt.status > 0 && he.status != tt.status:
				t.Errorf("%s/%d: status %d (%v), want %d", tt.name, chunk, he.status, he, tt.status)
			}
			if h.kind != tt.kind || h.host != tt.host && tt.status == 0 {
				t.Errorf("%s/%d: kind %q host %q, want %q %q", tt.name, chunk, h.kind, h.host, tt.kind, tt.host)
			}
			// Every byte read is in the head, in order; with small reads sniff stops once it
			// has decided, with one large read it has everything.
			want := tt.head
			if want < 0 && chunk == 1<<20 {
				want = len(tt.data)
			}
			if c.read != len(h.head) || !bytes.Equal(h.head, tt.data[:len(h.head)]) || want >= 0 && len(h.head) != want {
				t.Errorf("%s/%d: head of %d bytes (read %d), want the first %d", tt.name, chunk, len(h.head), c.read, want)
			}
		}
	}
}

func TestRequestLinePrefix(t *testing.T) {
	for in, want := range map[string]bool{
		"":                      true,
		"G":                     true,
		"GET":                   true,
		"GET ":                  true,
		"GET /a?b":              true,
		"GET /a HTTP/1.":        true,
		"GET /a HTTP/1.1":       true,
		"GET /a HTTP/1.1\r":     true,
		"PROPFIND /x HT":        true,
		" GET":                  false,
		"GET  /":                false,
		"GET /a HTTP/2":         false,
		"GET /a HTTP/1.x":       false,
		"GET /a HTTP/1.1\rx":    false,
		"GET /a HTTP/1.1 ":      false,
		"GET /\x01":             false,
		"G(T":                   false,
		strings.Repeat("A", 33): false,
		strings.Repeat("A", 32): true,
	} {
		if got := requestLinePrefix([]byte(in)); got != want {
			t.Errorf("requestLinePrefix(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestNormalHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.":                       "example.com",
		"a_b.example":                        "a_b.example",
		"[::1]":                              "::1",
		"::ffff:127.0.0.1":                   "127.0.0.1",
		"fe80::1%eth0":                       "fe80::1",
		"":                                   "",
		".":                                  "",
		"a..b":                               "",
		"a b":                                "",
		"a/b":                                "",
		"é.example":                          "",
		strings.Repeat("a", 64) + ".example": "",
	} {
		if got := normalHost(in); got != want {
			t.Errorf("normalHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzSniff(f *testing.F) {
	f.Add(clientHello(f, "api.example.test"), uint8(255), false)
	f.Add(reframe(f, clientHello(f, "x.test"), 7), uint8(3), false)
	f.Add(clientHello(f, ""), uint8(0), true)
	f.Add(echHello(f, "hidden.test", "cover.test"), uint8(255), false)
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n"), uint8(255), false)
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a.test:80\r\nContent-Length: 3\r\n\r\nabc"), uint8(4), true)
	f.Add([]byte("SSH-2.0-x\r\n"), uint8(255), false)
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 40}, uint8(1), true)
	f.Add([]byte{}, uint8(0), true)
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8, stall bool) {
		c := &chunkConn{data: data, chunk: int(chunk) + 1, stall: stall}
		h, err := sniff(c, time.Second, time.Second)
		if len(h.head) > maxHead {
			t.Fatalf("read %d bytes, more than %d", len(h.head), maxHead)
		}
		// Nothing read may be lost: the head is what goes upstream.
		if c.read != len(h.head) || !bytes.Equal(h.head, data[:len(h.head)]) {
			t.Fatalf("read %d bytes, head holds %d of them", c.read, len(h.head))
		}
		switch h.kind {
		case KindTLS, KindHTTP, KindTCP:
		default:
			t.Fatalf("kind %q", h.kind)
		}
		if h.host != "" && normalHost(h.host) != h.host {
			t.Fatalf("host %q is not normal", h.host)
		}
		if h.kind == KindTCP && (h.host != "" || err != nil) {
			t.Fatalf("unrecognised bytes with host %q, error %v", h.host, err)
		}
		var he *headError
		if err != nil && !errors.As(err, &he) {
			t.Fatalf("error %v is not a head error", err)
		}
	})
}
