package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/hiloop/hiloop/internal/testenv"
)

var testRoutes = []Route{
	{Host: "routed.example.test", Port: 443, To: netip.MustParseAddrPort("127.0.0.1:8443")},
	{Host: "other.example.test", Port: 80, To: netip.MustParseAddrPort("127.0.0.1:8080")},
}

// fakeHost is the host's resolver as the tests see it. Addresses of A records come back
// IPv4-mapped, as net.Resolver.LookupNetIP returns them for network "ip".
type fakeHost struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeHost) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	f.calls = append(f.calls, host)
	f.mu.Unlock()
	switch host {
	case "real.example.test":
		return []netip.Addr{netip.MustParseAddr("::ffff:203.0.113.7"), netip.MustParseAddr("2001:db8::7")}, nil
	case "v6only.example.test":
		return []netip.Addr{netip.MustParseAddr("2001:db8::6")}, nil
	case "rebind.example.test": // answers an address of the synthetic range
		return []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("::ffff:198.18.0.2"), netip.MustParseAddr("203.0.113.8")}, nil
	case "many.example.test":
		var addrs []netip.Addr
		for i := range 100 {
			addrs = append(addrs, netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}))
		}
		return addrs, nil
	case "broken.example.test":
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	case "refused.example.test":
		return nil, errors.New("connection refused")
	case "slow.example.test":
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (f *fakeHost) called(host string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.calls, host)
}

// serve runs r on UDP and TCP listeners on 127.0.0.1 and returns their addresses. At the end of
// the test it closes them and checks that both Serve calls return nil.
func serve(t *testing.T, r *Resolver) (udp, tcp string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- r.ServeUDP(pc) }()
	go func() { errs <- r.ServeTCP(ln) }()
	t.Cleanup(func() {
		pc.Close()
		ln.Close()
		for range 2 {
			select {
			case err := <-errs:
				if err != nil {
					t.Errorf("Serve returned %v after its socket was closed, want nil", err)
				}
			case <-testenv.Deadline(t):
				t.Error("Serve did not return after its socket was closed")
				return
			}
		}
	})
	return pc.LocalAddr().String(), ln.Addr().String()
}

// closeAtDeadline closes c when the test is about to time out, so a read that would wait
// forever fails with the test's own message.
func closeAtDeadline(t *testing.T, c io.Closer) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done); c.Close() })
	go func() {
		select {
		case <-testenv.Deadline(t):
			c.Close()
		case <-done:
		}
	}()
}

func question(name string, typ dnsmessage.Type) dnsmessage.Question {
	return dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}
}

// queryMsg builds a query for q; an ednsSize above 0 adds an OPT record advertising it.
func queryMsg(t testing.TB, id uint16, q dnsmessage.Question, ednsSize int) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	b.Question(q)
	if ednsSize > 0 {
		b.StartAdditionals()
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(ednsSize, dnsmessage.RCodeSuccess, false)
		b.OPTResource(rh, dnsmessage.OPTResource{})
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// client sends raw messages to a resolver over UDP or TCP.
type client struct {
	t       *testing.T
	network string
	conn    net.Conn
}

func dial(t *testing.T, network, addr string) *client {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	closeAtDeadline(t, c)
	return &client{t: t, network: network, conn: c}
}

func (c *client) send(msg []byte) {
	c.t.Helper()
	if c.network == "tcp" {
		msg = append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)
	}
	if _, err := c.conn.Write(msg); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads one answer message, unparsed.
func (c *client) recv() ([]byte, error) {
	if c.network == "tcp" {
		var size [2]byte
		if _, err := io.ReadFull(c.conn, size[:]); err != nil {
			return nil, err
		}
		msg := make([]byte, binary.BigEndian.Uint16(size[:]))
		_, err := io.ReadFull(c.conn, msg)
		return msg, err
	}
	buf := make([]byte, 1<<16)
	n, err := c.conn.Read(buf)
	return buf[:n], err
}

// answer reads answers until the one with the given ID, and returns it with its size.
func (c *client) answer(id uint16) (dnsmessage.Message, int) {
	c.t.Helper()
	for {
		b, err := c.recv()
		if err != nil {
			c.t.Fatalf("waiting for the answer to query %d over %s: %v", id, c.network, err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(b); err != nil {
			c.t.Fatalf("the answer does not parse: %v (%x)", err, b)
		}
		if m.ID == id {
			return m, len(b)
		}
	}
}

func (c *client) exchange(id uint16, q dnsmessage.Question, ednsSize int) dnsmessage.Message {
	c.t.Helper()
	c.send(queryMsg(c.t, id, q, ednsSize))
	m, _ := c.answer(id)
	return m
}

// addrs are the A and AAAA records of an answer.
func addrs(m dnsmessage.Message) []string {
	var out []string
	for _, rr := range m.Answers {
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A).String())
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA).String())
		case *dnsmessage.PTRResource:
			out = append(out, "ptr "+b.PTR.String())
		default:
			out = append(out, fmt.Sprintf("%T", b))
		}
	}
	return out
}

func opt(m dnsmessage.Message) *dnsmessage.Resource {
	for i, rr := range m.Additionals {
		if rr.Header.Type == dnsmessage.TypeOPT {
			return &m.Additionals[i]
		}
	}
	return nil
}

func TestResolverAnswers(t *testing.T) {
	fake := &fakeHost{}
	var mu sync.Mutex
	var records []Record
	r := &Resolver{Names: NewNames(testRoutes), Lookup: fake.lookup, Sandbox: "web", Audit: func(rec Record) {
		mu.Lock()
		records = append(records, rec)
		mu.Unlock()
	}}
	udp, tcp := serve(t, r)
	chaos := question("routed.example.test.", dnsmessage.TypeA)
	chaos.Class = dnsmessage.ClassCHAOS
	cases := []struct {
		q     dnsmessage.Question
		rcode dnsmessage.RCode
		addrs []string
		ttl   uint32
		rule  string
	}{
		{question("routed.example.test.", dnsmessage.TypeA), dnsmessage.RCodeSuccess, []string{"198.18.0.1"}, syntheticTTL, "route"},
		// A name as the client spelled it, case and all (0x20 randomisation), is echoed.
		{question("OTHER.Example.test.", dnsmessage.TypeA), dnsmessage.RCodeSuccess, []string{"198.18.0.2"}, syntheticTTL, "route"},
		{question("routed.example.test.", dnsmessage.TypeAAAA), dnsmessage.RCodeSuccess, nil, 0, "route"},
		{question("routed.example.test.", dnsmessage.TypeHTTPS), dnsmessage.RCodeSuccess, nil, 0, "route"},
		{question("real.example.test.", dnsmessage.TypeA), dnsmessage.RCodeSuccess, []string{"203.0.113.7"}, answerTTL, ""},
		{question("real.example.test.", dnsmessage.TypeAAAA), dnsmessage.RCodeSuccess, []string{"2001:db8::7"}, answerTTL, ""},
		{question("v6only.example.test.", dnsmessage.TypeA), dnsmessage.RCodeSuccess, nil, 0, ""},
		{question("rebind.example.test.", dnsmessage.TypeA), dnsmessage.RCodeSuccess, []string{"203.0.113.8"}, answerTTL, ""},
		{question("missing.example.test.", dnsmessage.TypeA), dnsmessage.RCodeNameError, nil, 0, "nxdomain"},
		{question("broken.example.test.", dnsmessage.TypeAAAA), dnsmessage.RCodeServerFailure, nil, 0, "servfail"},
		{question("refused.example.test.", dnsmessage.TypeA), dnsmessage.RCodeServerFailure, nil, 0, "servfail"},
		// Types other than A and AAAA are answered empty at once, without the host's resolver
		// (whose lookup of this name never ends).
		{question("slow.example.test.", dnsmessage.TypeHTTPS), dnsmessage.RCodeSuccess, nil, 0, ""},
		{question("slow.example.test.", dnsmessage.TypeSVCB), dnsmessage.RCodeSuccess, nil, 0, ""},
		{question("_http._tcp.slow.example.test.", dnsmessage.TypeSRV), dnsmessage.RCodeSuccess, nil, 0, ""},
		{question("slow.example.test.", dnsmessage.TypeMX), dnsmessage.RCodeSuccess, nil, 0, ""},
		{question("slow.example.test.", dnsmessage.TypeTXT), dnsmessage.RCodeSuccess, nil, 0, ""},
		{question("1.0.18.198.in-addr.arpa.", dnsmessage.TypePTR), dnsmessage.RCodeSuccess, []string{"ptr routed.example.test."}, syntheticTTL, "route"},
		{question("7.113.0.203.in-addr.arpa.", dnsmessage.TypePTR), dnsmessage.RCodeSuccess, nil, 0, ""},
		// localhost is loopback whatever the host's resolver says.
		{question("localhost.", dnsmessage.TypeA), dnsmessage.RCodeSuccess, []string{"127.0.0.1"}, syntheticTTL, "localhost"},
		{question("LocalHost.", dnsmessage.TypeAAAA), dnsmessage.RCodeSuccess, []string{"::1"}, syntheticTTL, "localhost"},
		{question("evil.localhost.", dnsmessage.TypeA), dnsmessage.RCodeSuccess, []string{"127.0.0.1"}, syntheticTTL, "localhost"},
		{question("localhost.", dnsmessage.TypeMX), dnsmessage.RCodeSuccess, nil, 0, "localhost"},
		// A name with bytes no host name has never reaches the host's resolver.
		{question("bad\\ name.example.test.", dnsmessage.TypeA), dnsmessage.RCodeNameError, nil, 0, "nxdomain"},
		{chaos, dnsmessage.RCodeRefused, nil, 0, "refused"},
	}
	for _, network := range []string{"udp", "tcp"} {
		addr := udp
		if network == "tcp" {
			addr = tcp
		}
		c := dial(t, network, addr)
		for i, tc := range cases {
			for j, edns := range []int{0, 1232} {
				id := uint16(2*i + j + 1)
				m := c.exchange(id, tc.q, edns)
				what := fmt.Sprintf("%s %s %s (edns %d)", network, tc.q.Name, tc.q.Type, edns)
				if !m.Response || !m.RecursionAvailable || !m.RecursionDesired || m.Truncated {
					t.Errorf("%s: header %+v, want a response with RD and RA, not truncated", what, m.Header)
				}
				if len(m.Questions) != 1 || m.Questions[0] != tc.q {
					t.Errorf("%s: question %v, want it echoed", what, m.Questions)
				}
				if m.RCode != tc.rcode {
					t.Errorf("%s: rcode %v, want %v", what, m.RCode, tc.rcode)
				}
				if got := addrs(m); !slices.Equal(got, tc.addrs) {
					t.Errorf("%s: answers %v, want %v", what, got, tc.addrs)
				}
				for _, rr := range m.Answers {
					if rr.Header.TTL != tc.ttl || rr.Header.Name != tc.q.Name {
						t.Errorf("%s: record %v, want TTL %d for the question's name", what, rr.Header, tc.ttl)
					}
				}
				if o := opt(m); (o != nil) != (edns > 0) {
					t.Errorf("%s: OPT record %v in the answer to a query with edns %d", what, o, edns)
				} else if o != nil && (o.Header.Class != ednsSize || len(m.Additionals) != 1) {
					t.Errorf("%s: additionals %v, want one OPT advertising %d", what, m.Additionals, ednsSize)
				}
			}
		}
	}
	for _, host := range []string{"slow.example.test", "_http._tcp.slow.example.test", "routed.example.test", "localhost", "evil.localhost"} {
		if fake.called(host) {
			t.Errorf("the host's resolver was asked for %s", host)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if want := 2 * 2 * len(cases); len(records) != want {
		t.Fatalf("%d audit records, want %d (one per query)", len(records), want)
	}
	for i, tc := range cases {
		rec := records[2*i]
		allowed := tc.rcode == dnsmessage.RCodeSuccess
		if rec.Sandbox != "web" || rec.Kind != KindDNS || rec.Host != normalizeHost(tc.q.Name.String()) ||
			rec.QueryType != strings.TrimPrefix(tc.q.Type.String(), "Type") || rec.Allowed != allowed ||
			rec.Rule != tc.rule || rec.BytesUp == 0 || rec.BytesDown == 0 || rec.Time.IsZero() {
			t.Errorf("audit record %+v for %s %s, want allowed %v by rule %q", rec, tc.q.Name, tc.q.Type, allowed, tc.rule)
		}
		var answers []string
		for _, a := range rec.Answers {
			answers = append(answers, a.String())
		}
		if tc.q.Type != dnsmessage.TypePTR && !slices.Equal(answers, tc.addrs) {
			t.Errorf("audit record for %s %s: answers %v, want %v", tc.q.Name, tc.q.Type, answers, tc.addrs)
		}
	}
}

// TestResolverGoClient asks through Go's own resolver, over UDP and over TCP, as a Go program in
// a sandbox would.
func TestResolverGoClient(t *testing.T) {
	fake := &fakeHost{}
	udp, tcp := serve(t, &Resolver{Names: NewNames(testRoutes), Lookup: fake.lookup})
	for _, network := range []string{"udp", "tcp"} {
		// In the udp pass Go's resolver picks the transport (UDP, TCP after TC); in the tcp pass it
		// gets TCP whatever it asks for.
		res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, asked, _ string) (net.Conn, error) {
			var d net.Dialer
			if network == "udp" && strings.HasPrefix(asked, "udp") {
				return d.DialContext(ctx, "udp", udp)
			}
			return d.DialContext(ctx, "tcp", tcp)
		}}
		ctx := context.Background()
		for _, c := range []struct {
			host string
			want []string
		}{
			{"routed.example.test.", []string{"198.18.0.1"}},
			{"real.example.test.", []string{"2001:db8::7", "203.0.113.7"}}, // sorted as strings
			{"v6only.example.test.", []string{"2001:db8::6"}},
		} {
			got, err := res.LookupNetIP(ctx, "ip", c.host)
			var s []string
			for _, a := range got {
				s = append(s, a.Unmap().String())
			}
			slices.Sort(s)
			if err != nil || !slices.Equal(s, c.want) {
				t.Errorf("%s: LookupNetIP(%s) = %v, %v; want %v", network, c.host, s, err, c.want)
			}
		}
		// Over UDP the 100 addresses do not fit: Go's resolver sees TC and asks again over TCP.
		if got, err := res.LookupNetIP(ctx, "ip4", "many.example.test."); err != nil || len(got) != 100 {
			t.Errorf("%s: LookupNetIP(many) = %d addresses, %v; want 100", network, len(got), err)
		}
		var dnsErr *net.DNSError
		if _, err := res.LookupNetIP(ctx, "ip", "missing.example.test."); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("%s: missing name: %v, want not found", network, err)
		}
		if _, err := res.LookupNetIP(ctx, "ip4", "broken.example.test."); !errors.As(err, &dnsErr) || dnsErr.IsNotFound {
			t.Errorf("%s: a failing host resolver: %v, want a failure that is not 'not found'", network, err)
		}
	}
}

func TestResolverTruncation(t *testing.T) {
	fake := &fakeHost{}
	udp, tcp := serve(t, &Resolver{Names: NewNames(testRoutes), Lookup: fake.lookup})
	q := question("many.example.test.", dnsmessage.TypeA)
	c := dial(t, "udp", udp)
	for _, edns := range []int{0, 256, 1232, 4096} {
		c.send(queryMsg(t, 7, q, edns))
		m, size := c.answer(7)
		limit := min(max(edns, 512), ednsSize)
		if !m.Truncated || len(m.Answers) != 0 || size > limit || m.RCode != dnsmessage.RCodeSuccess {
			t.Errorf("udp, edns %d: %d bytes, TC %v, %d answers, %v; want TC and no answers within %d bytes",
				edns, size, m.Truncated, len(m.Answers), m.RCode, limit)
		}
		if len(m.Questions) != 1 || m.Questions[0] != q || (opt(m) != nil) != (edns > 0) {
			t.Errorf("udp, edns %d: a truncated answer must keep the question and the OPT record: %v", edns, m)
		}
	}
	m := dial(t, "tcp", tcp).exchange(8, q, 0)
	if m.Truncated || len(m.Answers) != 100 {
		t.Errorf("tcp: TC %v and %d answers, want the whole answer (100)", m.Truncated, len(m.Answers))
	}
}

// TestResolverMalformed sends what a broken or hostile client sends; the server answers FORMERR
// (or NOTIMP) where it can read an ID, drops the rest, and keeps answering.
func TestResolverMalformed(t *testing.T) {
	fake := &fakeHost{}
	r := &Resolver{Names: NewNames(testRoutes), Lookup: fake.lookup}
	udp, tcp := serve(t, r)
	q := question("routed.example.test.", dnsmessage.TypeA)
	valid := queryMsg(t, 1, q, 0)
	twoQuestions := func() []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1})
		b.StartQuestions()
		b.Question(q)
		b.Question(question("real.example.test.", dnsmessage.TypeA))
		msg, _ := b.Finish()
		return msg
	}()
	twoOPTs := func() []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1})
		b.StartQuestions()
		b.Question(q)
		b.StartAdditionals()
		for range 2 {
			var rh dnsmessage.ResourceHeader
			rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
			b.OPTResource(rh, dnsmessage.OPTResource{})
		}
		msg, _ := b.Finish()
		return msg
	}()
	badVersion := append([]byte(nil), queryMsg(t, 1, q, 1232)...)
	badVersion[len(badVersion)-5] = 1 // the OPT record's TTL carries the EDNS version

	withID := func(msg []byte, id uint16) []byte {
		msg = append([]byte(nil), msg...)
		binary.BigEndian.PutUint16(msg, id)
		return msg
	}
	answered := []struct {
		name  string
		msg   []byte
		rcode dnsmessage.RCode
	}{
		{"header only", make([]byte, 12), dnsmessage.RCodeFormatError},
		{"a question cut short", valid[:len(valid)-2], dnsmessage.RCodeFormatError},
		{"two questions", twoQuestions, dnsmessage.RCodeFormatError},
		{"two OPT records", twoOPTs, dnsmessage.RCodeFormatError},
		{"a name pointing at itself", append(withID(valid[:12], 1), 0xc0, 12, 0, 1, 0, 1), dnsmessage.RCodeFormatError},
		{"a count beyond the message", func() []byte { m := withID(valid, 1); m[7] = 9; return m }(), dnsmessage.RCodeFormatError},
		{"opcode UPDATE", func() []byte { m := withID(valid, 1); m[2] |= 5 << 3; return m }(), dnsmessage.RCodeNotImplemented},
		{"EDNS version 1", badVersion, dnsmessage.RCodeSuccess}, // BADVERS: 0 in the header, 1 in OPT
	}
	for _, network := range []string{"udp", "tcp"} {
		addr := udp
		if network == "tcp" {
			addr = tcp
		}
		for i, tc := range answered {
			c := dial(t, network, addr)
			id := uint16(1000 + i)
			c.send(withID(tc.msg, id))
			m, _ := c.answer(id)
			if !m.Response || m.RCode != tc.rcode || len(m.Answers) != 0 {
				t.Errorf("%s, %s: %v answers, rcode %v; want %v and none", network, tc.name, len(m.Answers), m.RCode, tc.rcode)
			}
			if tc.name == "EDNS version 1" {
				if o := opt(m); o == nil || o.Header.ExtendedRCode(m.RCode) != rcodeBadVers {
					t.Errorf("%s, %s: OPT %v, want BADVERS", network, tc.name, o)
				}
			}
			// The server still answers, on the same connection.
			if m := c.exchange(2, q, 0); m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
				t.Errorf("%s, after %s: %v", network, tc.name, m)
			}
		}
	}

	// What carries no ID, or is itself a response, gets no answer at all.
	response := withID(valid, 3)
	response[2] |= 0x80
	for _, msg := range [][]byte{nil, {0}, valid[:11], response} {
		if b := r.answer(context.Background(), msg, udpMinSize, false); b != nil {
			t.Errorf("answer(%x) = %x, want nothing", msg, b)
		}
		c := dial(t, "udp", udp)
		c.send(msg)
		if m := c.exchange(4, q, 0); m.RCode != dnsmessage.RCodeSuccess {
			t.Errorf("udp, after %x: %v", msg, m)
		}
	}
	// Over TCP such a message ends the connection.
	c := dial(t, "tcp", tcp)
	c.send(response)
	if b, err := c.recv(); err == nil {
		t.Errorf("tcp: a response got %x, want the connection closed", b)
	}
	// A length prefix followed by nothing is a slow client: the server does not wait for it
	// forever, but it does not hold up other connections either.
	slow := dial(t, "tcp", tcp)
	slow.conn.Write([]byte{0, 40, 1})
	if m := dial(t, "tcp", tcp).exchange(5, q, 0); m.RCode != dnsmessage.RCodeSuccess {
		t.Errorf("tcp, beside a slow client: %v", m)
	}
}

// blockingHost is a host resolver whose lookups wait until released, whatever their context.
type blockingHost struct {
	started chan string
	release chan struct{}
}

func (b *blockingHost) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	b.started <- host
	<-b.release
	return []netip.Addr{netip.MustParseAddr("203.0.113.9")}, nil
}

// TestResolverBusy fills a sandbox's query slots with lookups that do not return: the next query
// that needs the host's resolver gets SERVFAIL at once, routed names are still answered, and
// once the lookups return the server answers everything again.
func TestResolverBusy(t *testing.T) {
	host := &blockingHost{started: make(chan string, maxQueries+1), release: make(chan struct{})}
	var mu sync.Mutex
	rules := map[string]int{}
	r := &Resolver{Names: NewNames(testRoutes), Lookup: host.lookup, Audit: func(rec Record) {
		mu.Lock()
		rules[rec.Rule]++
		mu.Unlock()
	}}
	udp, tcp := serve(t, r)
	c := dial(t, "udp", udp)
	for i := range maxQueries {
		c.send(queryMsg(t, uint16(i), question(fmt.Sprintf("n%d.example.test.", i), dnsmessage.TypeA), 0))
	}
	for range maxQueries {
		select {
		case <-host.started:
		case <-testenv.Deadline(t):
			t.Fatal("the lookups never started")
		}
	}
	for _, network := range []string{"udp", "tcp"} {
		addr := udp
		if network == "tcp" {
			addr = tcp
		}
		c := dial(t, network, addr)
		if m := c.exchange(500, question("extra.example.test.", dnsmessage.TypeA), 0); m.RCode != dnsmessage.RCodeServerFailure {
			t.Errorf("%s: a query beyond the cap got %v, want SERVFAIL", network, m.RCode)
		}
		if m := c.exchange(501, question("routed.example.test.", dnsmessage.TypeA), 0); m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
			t.Errorf("%s: a routed name while busy got %v", network, m)
		}
	}
	close(host.release)
	got := map[uint16]bool{}
	for len(got) < maxQueries {
		b, err := c.recv()
		if err != nil {
			t.Fatalf("after %d of the blocked answers: %v", len(got), err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(b); err != nil || m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
			t.Fatalf("a blocked query's answer: %v, %v", m, err)
		}
		got[m.ID] = true
	}
	for _, network := range []string{"udp", "tcp"} {
		addr := udp
		if network == "tcp" {
			addr = tcp
		}
		if m := dial(t, network, addr).exchange(600, question("after.example.test.", dnsmessage.TypeA), 0); m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
			t.Errorf("%s: after the lookups returned: %v", network, m)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if rules["busy"] != 2 {
		t.Errorf("audit rules %v, want two busy", rules)
	}
}

// TestResolverTCPConnections caps a sandbox's open TCP connections: beyond the cap a new one is
// closed at once, and once connections close new ones are served again.
func TestResolverTCPConnections(t *testing.T) {
	fake := &fakeHost{}
	_, tcp := serve(t, &Resolver{Names: NewNames(testRoutes), Lookup: fake.lookup})
	q := question("routed.example.test.", dnsmessage.TypeA)
	var open []*client
	for i := range maxTCPConns {
		c := dial(t, "tcp", tcp)
		c.exchange(uint16(i), q, 0) // served: it holds a slot
		open = append(open, c)
	}
	extra := dial(t, "tcp", tcp)
	extra.send(queryMsg(t, 99, q, 0))
	if b, err := extra.recv(); err == nil {
		t.Errorf("connection %d got an answer %x, want it closed", maxTCPConns+1, b)
	}
	for _, c := range open {
		c.conn.Close()
	}
	// The slots come free as the server notices the closes; try until a connection is served.
	for {
		c := dial(t, "tcp", tcp)
		c.send(queryMsg(t, 100, q, 0))
		if _, err := c.recv(); err == nil {
			break
		}
		select {
		case <-testenv.Deadline(t):
			t.Fatal("no connection served after the others closed")
		default:
		}
	}
}

func TestValidHost(t *testing.T) {
	for host, want := range map[string]bool{
		"example.com": true, "a-b.c_d.example": true, "xn--bcher-kva.example": true, "1.2.3.4": true,
		"": false, "a..b": false, ".a": false, "a b.example": false, "a\x00b": false, "é.example": false,
		strings.Repeat("a", 64) + ".example": false, strings.Repeat("a.", 127) + "bb": false,
	} {
		if got := validHost(host); got != want {
			t.Errorf("validHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// An address the proxy would refuse to dial is left out of answers, so a sandbox cannot map a
// private network's names by asking for them; the audit record names what was withheld.
func TestResolverWithholdsRefusedAddresses(t *testing.T) {
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "mixed.example.test":
			return []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.5"), netip.MustParseAddr("::ffff:203.0.113.9"), netip.MustParseAddr("fd00::5"), netip.MustParseAddr("2001:db8::9")}, nil
		case "internal.example.test":
			return []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.5"), netip.MustParseAddr("::ffff:192.168.1.5"), netip.MustParseAddr("::ffff:127.0.0.1")}, nil
		case "nat64.example.test":
			return []netip.Addr{netip.MustParseAddr("64:ff9b::a00:5"), netip.MustParseAddr("64:ff9b::203.0.113.9")}, nil
		case "denied.example.test":
			return []netip.Addr{netip.MustParseAddr("::ffff:203.0.113.66"), netip.MustParseAddr("::ffff:203.0.113.77")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var records recorder
	var hp atomicPolicy
	hp.set(mustPolicy(t, false, nil, []string{"203.0.113.66", "203.0.113.77:443"}))
	r := &Resolver{Lookup: lookup, Addrs: &AddrPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}, Local: noLocal},
		Policy: hp.get, Audit: records.add}
	udp, _ := serve(t, r)
	c := dial(t, "udp", udp)
	id := uint16(0)
	for _, tc := range []struct {
		name string
		typ  dnsmessage.Type
		want string
		rule string
	}{
		{"mixed.example.test", dnsmessage.TypeA, "203.0.113.9", "withheld: mixed.example.test resolves to 10.0.0.5, a private address (RFC 1918)"},
		{"mixed.example.test", dnsmessage.TypeAAAA, "2001:db8::9", "withheld: mixed.example.test resolves to fd00::5, a unique local address"},
		// The operator's --egress-allow-cidr opens 192.168.0.0/16, and only that.
		{"internal.example.test", dnsmessage.TypeA, "192.168.1.5", "withheld 2 addresses: internal.example.test resolves to 10.0.0.5, a private address (RFC 1918), ..."},
		{"nat64.example.test", dnsmessage.TypeAAAA, "64:ff9b::cb00:7109", "withheld: nat64.example.test resolves to 64:ff9b::a00:5, an address embedding 10.0.0.5"},
		// A deny rule on an address for every port withholds it; one for a port does not.
		{"denied.example.test", dnsmessage.TypeA, "203.0.113.77", "withheld: denied.example.test resolves to 203.0.113.66, egress deny 203.0.113.66"},
	} {
		id++
		m := c.exchange(id, question(tc.name+".", tc.typ), 0)
		if got := strings.Join(addrs(m), ","); m.RCode != dnsmessage.RCodeSuccess || got != tc.want {
			t.Errorf("%s %s: %v %s, want %s", tc.name, tc.typ, m.RCode, got, tc.want)
		}
		rec := records.find(tc.name)
		if rec == nil || !rec.Allowed || !strings.HasPrefix(rec.Rule, tc.rule) || fmt.Sprint(rec.Answers) != "["+tc.want+"]" {
			t.Errorf("%s %s: record %+v, want rule %q", tc.name, tc.typ, rec, tc.rule)
		}
		records.mu.Lock()
		records.recs = nil
		records.mu.Unlock()
	}
}

// The proxy and the resolver resolve a name with one lookup, hostLookup, unless told otherwise:
// a name means the same to the sandbox and to the gateway.
func TestOneLookup(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	orig := hostLookup
	t.Cleanup(func() { hostLookup = orig })
	hostLookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		mu.Lock()
		asked = append(asked, host)
		mu.Unlock()
		return []netip.Addr{netip.MustParseAddr("10.0.0.9")}, nil
	}
	udp, _ := serve(t, &Resolver{Addrs: &AddrPolicy{Local: noLocal}})
	dial(t, "udp", udp).exchange(1, question("db.corp.test.", dnsmessage.TypeA), 0)

	p := &Proxy{Policy: &AddrPolicy{Local: noLocal}}
	t.Cleanup(func() { p.Close() })
	p.init()
	_, err := p.dial(context.Background(), "db.corp.test", 5432)
	var d *Denied
	if !errors.As(err, &d) || d.Error() != "db.corp.test resolves to a private address (RFC 1918)" {
		t.Fatalf("proxy: %v, want db.corp.test refused as private", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, []string{"db.corp.test", "db.corp.test"}) {
		t.Fatalf("hostLookup was asked %q, want db.corp.test by the resolver and the proxy", asked)
	}
}
