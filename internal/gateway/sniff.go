package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// maxHead caps what the gateway reads from a connection before it knows where the connection
// goes: a TLS ClientHello or an HTTP/1 request head. A ClientHello with post-quantum key shares
// is under 2 KiB; net/http's default header cap is 1 MiB, but no sane request needs 64 KiB.
const maxHead = 64 << 10

// hello is what the first bytes of a transparently captured connection say about where it goes.
type hello struct {
	kind   string // KindTLS, KindHTTP, or KindTCP when the bytes are neither (or there are none)
	host   string // the SNI or the Host header's host, normalised by normalHost; "" if none
	method string // HTTP only
	target string // HTTP only: the request target as sent
	head   []byte // every byte read from the connection: it goes upstream before the splice
	// ech: the ClientHello carries encrypted_client_hello, so host is only its cover name (the
	// public name of the server's ECH configuration, or anything for GREASE), and the server
	// it is for is encrypted.
	ech bool
}

// headError is a client's fault in the bytes the gateway had to read: a slow, truncated,
// oversized or malformed request head. status is the HTTP answer for an HTTP client.
type headError struct {
	status int
	msg    string
}

func (e *headError) Error() string { return e.msg }

// readDeadliner is what sniff needs of a connection.
type readDeadliner interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// sniff reads the start of a connection without losing any of it: hello.head holds every byte
// read, however the client split them into reads and records. A client that sends nothing
// within first (a server-speaks-first protocol: SSH, SMTP) or nothing recognisable is KindTCP;
// while the bytes could still be the start of a TLS record header or an HTTP request line but
// are not yet, each read waits at most first, so another protocol that happens to start the
// same way is not held up for long. Once they are a TLS record header or a request line, the
// ClientHello or the request head must be complete within total (from the call) and maxHead;
// otherwise the error is a *headError (or the connection's read error). The read deadline is
// cleared on return.
func sniff(c readDeadliner, first, total time.Duration) (hello, error) {
	s := &sniffer{c: c, first: first, total: total, end: time.Now().Add(total)}
	defer c.SetReadDeadline(time.Time{})
	s.shortDeadline()
	if err := s.fill(1); err != nil {
		if isTimeout(err) || errors.Is(err, io.EOF) {
			return hello{kind: KindTCP}, nil
		}
		return hello{kind: KindTCP}, err
	}
	switch b := s.buf[0]; {
	case b == 0x16: // TLS handshake record
		return s.tls()
	case 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z':
		return s.http()
	}
	return s.unrecognised(), nil
}

// sniffer accumulates what it reads from c in buf, never more than maxHead bytes.
type sniffer struct {
	c     readDeadliner
	buf   []byte
	first time.Duration
	total time.Duration
	end   time.Time // the deadline for the whole head
}

// shortDeadline makes the next read wait for at most first.
func (s *sniffer) shortDeadline() {
	d := time.Now().Add(s.first)
	if d.After(s.end) {
		d = s.end
	}
	s.c.SetReadDeadline(d)
}

// fillWhile reads a byte or more at a time, each within first, while unsure(buf) holds. It
// reports false if the bytes stop coming or turn out to be something else.
func (s *sniffer) fillWhile(unsure func([]byte) bool) (bool, error) {
	for unsure(s.buf) {
		s.shortDeadline()
		if err := s.fill(len(s.buf) + 1); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, errHeadTooLarge) || isTimeout(err) {
				return false, nil
			}
			return false, err
		}
	}
	s.c.SetReadDeadline(s.end)
	return true, nil
}

var errHeadTooLarge = errors.New("more than 64 KiB before the end of the head")

// fill reads until buf holds at least n bytes.
func (s *sniffer) fill(n int) error {
	if n > maxHead {
		return errHeadTooLarge
	}
	for empty := 0; len(s.buf) < n; {
		if cap(s.buf) < n {
			// Grow by doubling, so a head that trickles in a byte at a time costs O(n).
			nb := make([]byte, len(s.buf), min(max(n, 2*cap(s.buf), 2048), maxHead))
			copy(nb, s.buf)
			s.buf = nb
		}
		k, err := s.c.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+k]
		if len(s.buf) >= n {
			return nil
		}
		if err != nil {
			return err
		}
		if k == 0 {
			if empty++; empty == 100 {
				return io.ErrNoProgress
			}
		}
	}
	return nil
}

// unrecognised is a connection decided by its address: everything read so far goes upstream.
func (s *sniffer) unrecognised() hello { return hello{kind: KindTCP, head: s.buf} }

// tls reads TLS records until the first handshake message, the ClientHello, is complete, and
// takes its SNI. Bytes that turn out not to be a ClientHello are not TLS as far as the gateway
// can tell: the connection is decided by its address.
func (s *sniffer) tls() (hello, error) {
	ok, err := s.fillWhile(func(b []byte) bool { return len(b) < 5 && tlsHeaderPrefix(b) })
	if err != nil {
		return hello{kind: KindTCP, head: s.buf}, err
	}
	if !ok || !tlsHeaderPrefix(s.buf[:5]) {
		return s.unrecognised(), nil
	}
	var msg []byte // the handshake bytes of the records read so far
	for off := 0; ; {
		if err := s.fill(off + 5); err != nil {
			return s.tlsFault(err)
		}
		hdr := s.buf[off : off+5]
		n := int(hdr[3])<<8 | int(hdr[4])
		if !tlsHeaderPrefix(hdr) {
			return s.unrecognised(), nil
		}
		if err := s.fill(off + 5 + n); err != nil {
			return s.tlsFault(err)
		}
		msg = append(msg, s.buf[off+5:off+5+n]...)
		off += 5 + n
		if len(msg) < 4 {
			continue
		}
		if msg[0] != 1 { // not a ClientHello
			return s.unrecognised(), nil
		}
		if size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]); len(msg) >= 4+size {
			sni, ech, ok := serverName(msg[4 : 4+size])
			if !ok {
				return s.unrecognised(), nil
			}
			return hello{kind: KindTLS, host: normalHost(sni), head: s.buf, ech: ech}, nil
		}
	}
}

// tlsHeaderPrefix reports whether b is (the start of) a TLS handshake record header: type 22,
// version 3.0 to 3.4, a length from 1 to 2^14.
func tlsHeaderPrefix(b []byte) bool {
	switch {
	case len(b) > 0 && b[0] != 0x16, len(b) > 1 && b[1] != 3, len(b) > 2 && b[2] > 4:
		return false
	case len(b) > 4:
		n := int(b[3])<<8 | int(b[4])
		return n > 0 && n <= 1<<14
	}
	return true
}

func (s *sniffer) tlsFault(err error) (hello, error) {
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, errHeadTooLarge):
		return s.unrecognised(), nil
	case isTimeout(err):
		return hello{kind: KindTLS, head: s.buf}, &headError{msg: fmt.Sprintf("no complete TLS ClientHello within %s", s.total)}
	}
	return hello{kind: KindTLS, head: s.buf}, err
}

// extECH is TLS's encrypted_client_hello extension (ECH): its presence means the SNI names
// a cover host, whether the extension is real or GREASE, which nobody on the path can tell apart.
const extECH = 0xfe0d

// serverName parses a ClientHello message body and returns its host_name server name, "" if it
// has none, and whether it carries encrypted_client_hello. ok is false if the message is
// malformed.
func serverName(m cryptobyte.String) (name string, ech, ok bool) {
	var sessionID, suites, compression, exts cryptobyte.String
	if !m.Skip(2+32) || // legacy_version, random
		!m.ReadUint8LengthPrefixed(&sessionID) ||
		!m.ReadUint16LengthPrefixed(&suites) ||
		!m.ReadUint8LengthPrefixed(&compression) {
		return "", false, false
	}
	if m.Empty() {
		return "", false, true // no extensions
	}
	if !m.ReadUint16LengthPrefixed(&exts) || !m.Empty() {
		return "", false, false
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return "", false, false
		}
		if typ == extECH {
			ech = true
		}
		if typ != 0 { // server_name
			continue
		}
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() {
			return "", false, false
		}
		for !list.Empty() {
			var nameType uint8
			var host cryptobyte.String
			if !list.ReadUint8(&nameType) || !list.ReadUint16LengthPrefixed(&host) {
				return "", false, false
			}
			if nameType == 0 && name == "" {
				name = string(host)
			}
		}
	}
	return name, ech, true
}

// http reads an HTTP/1 request head. Bytes whose first line is not a request line are not HTTP
// as far as the gateway can tell: the connection is decided by its address.
func (s *sniffer) http() (hello, error) {
	// Scanning resumes where it stopped, so a line that trickles in a byte at a time costs
	// O(n), not O(n²).
	scanned := 0
	ok, err := s.fillWhile(func(b []byte) bool {
		if bytes.IndexByte(b[scanned:], '\n') >= 0 {
			return false
		}
		scanned = len(b)
		return requestLinePrefix(b)
	})
	if err != nil {
		return hello{kind: KindTCP, head: s.buf}, err
	}
	if !ok {
		return s.unrecognised(), nil
	}
	line, _, _ := bytes.Cut(s.buf, []byte("\n"))
	method, target, ok := requestLine(line)
	if !ok {
		return s.unrecognised(), nil
	}
	h := hello{kind: KindHTTP, method: method, target: target}
	end, from := headEnd(s.buf, 0)
	for end < 0 {
		err := s.fill(len(s.buf) + 1)
		h.head = s.buf
		switch {
		case err == nil:
			end, from = headEnd(s.buf, from)
			continue
		case errors.Is(err, errHeadTooLarge):
			return h, &headError{status: http.StatusRequestHeaderFieldsTooLarge, msg: "request head larger than 64 KiB"}
		case isTimeout(err):
			return h, &headError{status: http.StatusRequestTimeout, msg: fmt.Sprintf("no complete request head within %s", s.total)}
		case errors.Is(err, io.EOF):
			return h, &headError{status: http.StatusBadRequest, msg: "the request head ends early"}
		}
		return h, err
	}
	h.head = s.buf
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(s.buf[:end])))
	if err != nil {
		return h, &headError{status: http.StatusBadRequest, msg: "malformed request: " + err.Error()}
	}
	// http.ReadRequest refuses a second Host header and moves the one into req.Host.
	host := req.Host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	if h.host = normalHost(host); h.host == "" && host != "" {
		return h, &headError{status: http.StatusBadRequest, msg: fmt.Sprintf("malformed request: Host %q is not a host name", req.Host)}
	}
	return h, nil
}

// requestLine splits an HTTP/1 request line (METHOD SP TARGET SP HTTP/1.x [CR]).
func requestLine(line []byte) (method, target string, ok bool) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	m, rest, ok1 := bytes.Cut(line, []byte(" "))
	t, proto, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || len(m) == 0 || len(t) == 0 ||
		len(proto) != len("HTTP/1.1") || !bytes.HasPrefix(proto, []byte("HTTP/1.")) || proto[7] < '0' || proto[7] > '9' {
		return "", "", false
	}
	for _, b := range m {
		if !isTokenByte(b) {
			return "", "", false
		}
	}
	for _, b := range t {
		if b <= ' ' || b == 0x7f {
			return "", "", false
		}
	}
	return string(m), string(t), true
}

// requestLinePrefix reports whether b, which holds no newline, can still become a request line.
func requestLinePrefix(b []byte) bool {
	m, rest, ok := bytes.Cut(b, []byte(" "))
	if len(m) > 32 || ok && len(m) == 0 { // WebDAV's longest method has 16 bytes
		return false
	}
	for _, c := range m {
		if !isTokenByte(c) {
			return false
		}
	}
	if !ok {
		return true
	}
	t, proto, ok := bytes.Cut(rest, []byte(" "))
	for _, c := range t {
		if c < ' ' || c == 0x7f {
			return false
		}
	}
	if !ok {
		return true
	}
	const want = "HTTP/1.x\r"
	if len(proto) > len(want) || ok && len(t) == 0 {
		return false
	}
	for i, c := range proto {
		if i == 7 && (c < '0' || c > '9') || i != 7 && c != want[i] {
			return false
		}
	}
	return true
}

func isTokenByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// headEnd returns the offset just past the empty line that ends an HTTP head in b, or -1 and
// the start of the last incomplete line, from which to resume once b has grown.
func headEnd(b []byte, from int) (end, next int) {
	for start := from; ; {
		i := bytes.IndexByte(b[start:], '\n')
		if i < 0 {
			return -1, start
		}
		line := bytes.TrimSuffix(b[start:start+i], []byte("\r"))
		if len(line) == 0 && start > 0 {
			return start + i + 1, 0
		}
		start += i + 1
	}
}

// normalHost returns a host name in the form routes use (lower case, no trailing dot), an
// address literal in its canonical form, or "" if s is neither.
func normalHost(s string) string {
	s = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")), ".")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.WithZone("").Unmap().String()
	}
	if len(s) == 0 || len(s) > 253 {
		return ""
	}
	for _, label := range strings.Split(s, ".") {
		if len(label) == 0 || len(label) > 63 {
			return ""
		}
		for i := 0; i < len(label); i++ {
			if b := label[i]; !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '-' || b == '_') {
				return ""
			}
		}
	}
	return s
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
