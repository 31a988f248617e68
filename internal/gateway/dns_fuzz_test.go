package gateway

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// fuzzLookup is a host resolver that answers at once, each name one way picked by its hash:
// addresses of both families, some in the synthetic range, too many for UDP, not found, failed.
func fuzzLookup(_ context.Context, host string) ([]netip.Addr, error) {
	h := fnv.New32a()
	h.Write([]byte(host))
	switch h.Sum32() % 5 {
	case 0:
		return []netip.Addr{netip.MustParseAddr("::ffff:203.0.113.1"), netip.MustParseAddr("2001:db8::1")}, nil
	case 1:
		return []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("::ffff:198.19.0.9"), netip.MustParseAddr("203.0.113.2")}, nil
	case 2:
		var addrs []netip.Addr
		for i := range 60 { // A records overflow 512 bytes, AAAA records 1232 too
			addrs = append(addrs, netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)}))
		}
		return addrs, nil
	case 3:
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
}

// FuzzResolverPacket feeds arbitrary bytes, as a sandbox may send them, to the function that
// turns one query into one answer. Whatever the bytes: no panic; no answer only for what has no
// ID or is a response; otherwise an answer that parses, echoes the ID, fits the transport, and
// never gives a name that is not routed an address in the synthetic range, except a name a
// closed policy refuses the address that stands for it.
func FuzzResolverPacket(f *testing.F) {
	q := func(name string, typ dnsmessage.Type, edns int) []byte {
		return queryMsg(f, 0x1234, question(name, typ), edns)
	}
	for _, seed := range [][]byte{
		q("routed.example.test.", dnsmessage.TypeA, 0),
		q("Routed.Example.Test.", dnsmessage.TypeAAAA, 1232),
		q("real.example.test.", dnsmessage.TypeA, 0),
		q("real.example.test.", dnsmessage.TypeAAAA, 4096),
		q("many.example.test.", dnsmessage.TypeA, 0),
		q("missing.example.test.", dnsmessage.TypeA, 512),
		q("slow.example.test.", dnsmessage.TypeHTTPS, 1232),
		q("1.0.18.198.in-addr.arpa.", dnsmessage.TypePTR, 0),
		q("localhost.", dnsmessage.TypeA, 0),
		q("Refused.Example.Test.", dnsmessage.TypeA, 0),
		q("a.localhost.", dnsmessage.TypeAAAA, 0),
		q(".", dnsmessage.TypeA, 0),
		{}, {0x12}, make([]byte, 12),
		{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}, // a name pointing at itself
		{0x12, 0x34, 0x29, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1},        // opcode UPDATE
		{0x12, 0x34, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1},        // a response
		{0x12, 0x34, 0x01, 0x00, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 28, 0, 1},
	} {
		f.Add(seed)
	}
	names := NewNames(testRoutes)
	open := &Resolver{Names: names, Lookup: fuzzLookup, Sandbox: "fuzz"}
	open.init()
	refused := &RefusedNames{}
	policy := &HostPolicy{Closed: true, Allow: []HostRule{{Host: "real.example.test"}, {Host: "routed.example.test"}}}
	closed := &Resolver{Names: names, Lookup: fuzzLookup, Sandbox: "fuzz", Policy: func() *HostPolicy { return policy }, Refused: refused}
	closed.init()
	f.Fuzz(func(t *testing.T, query []byte) {
		var want dnsmessage.Message
		wantErr := want.Unpack(query)
		for _, r := range []*Resolver{open, closed} {
			for _, limit := range []int{udpMinSize, tcpMaxSize} {
				for _, busy := range []bool{false, true} {
					resp := r.answer(context.Background(), query, limit, busy)
					if resp == nil {
						if len(query) >= 12 && query[2]&0x80 == 0 {
							t.Fatalf("no answer to a query with an ID (limit %d, busy %v)", limit, busy)
						}
						continue
					}
					if len(query) < 12 || query[2]&0x80 != 0 {
						t.Fatalf("an answer %x to a message without an ID or to a response", resp)
					}
					if len(resp) > max(limit, ednsSize) {
						t.Fatalf("an answer of %d bytes over a transport taking %d", len(resp), limit)
					}
					var m dnsmessage.Message
					if err := m.Unpack(resp); err != nil {
						t.Fatalf("the answer %x does not parse: %v", resp, err)
					}
					if id := binary.BigEndian.Uint16(query); m.ID != id || !m.Response {
						t.Fatalf("answer header %+v to query %d", m.Header, id)
					}
					if m.RCode == dnsmessage.RCodeSuccess && wantErr == nil && (len(m.Questions) != 1 || len(want.Questions) != 1 || m.Questions[0] != want.Questions[0]) {
						t.Fatalf("answer questions %v to questions %v", m.Questions, want.Questions)
					}
					for _, rr := range m.Answers {
						a, ok := rr.Body.(*dnsmessage.AResource)
						if !ok {
							continue
						}
						addr, name := netip.AddrFrom4(a.A), rr.Header.Name.String()
						want, routed := names.Addr(name)
						switch {
						case RefusedPrefix.Contains(addr):
							if h, ok := refused.Host(addr); r != closed || !ok || h != normalizeHost(name) || policy.CheckName(name) == nil {
								t.Fatalf("%s answered %v, which stands for %q", name, addr, h)
							}
						case names.Synthetic(addr) && (!routed || want != addr):
							t.Fatalf("%s answered %v", name, addr)
						}
					}
				}
			}
		}
	})
}
