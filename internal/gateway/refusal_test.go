package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// The refused names' addresses are the top of the synthetic range, apart from the routed hosts'.
func TestRefusedPrefix(t *testing.T) {
	if !SyntheticPrefix.Contains(RefusedPrefix.Addr()) || RefusedPrefix.Bits() < SyntheticPrefix.Bits() {
		t.Fatalf("%v is not inside %v", RefusedPrefix, SyntheticPrefix)
	}
	if n := 1 << (32 - RefusedPrefix.Bits()); n != MaxRefusedNames {
		t.Fatalf("%v holds %d addresses, MaxRefusedNames is %d", RefusedPrefix, n, MaxRefusedNames)
	}
	last := netip.MustParseAddr("198.19.255.255")
	if !RefusedPrefix.Contains(last) {
		t.Fatalf("%v is not the top of %v", RefusedPrefix, SyntheticPrefix)
	}
	// The highest address a route can get (TestNamesFull) is just below.
	if RefusedPrefix.Contains(netip.MustParseAddr("198.19.251.255")) {
		t.Fatalf("%v overlaps the routed hosts' addresses", RefusedPrefix)
	}
}

func TestRefusedNames(t *testing.T) {
	var n RefusedNames
	a := n.Addr("Refused.Example.Test.")
	if a != RefusedPrefix.Addr() {
		t.Fatalf("the first refused name got %v, want %v", a, RefusedPrefix.Addr())
	}
	if b := n.Addr("refused.example.test"); b != a {
		t.Fatalf("the same name in another case got %v, then %v", a, b)
	}
	if h, ok := n.Host(a); !ok || h != "refused.example.test" {
		t.Fatalf("Host(%v) = %q, %v", a, h, ok)
	}
	if h, ok := n.Host(netip.AddrFrom16(a.As16())); !ok || h != "refused.example.test" {
		t.Fatalf("Host of the IPv4-mapped address = %q, %v", h, ok)
	}
	if b := n.Addr("other.example.test"); b == a || !RefusedPrefix.Contains(b) {
		t.Fatalf("a second name got %v (the first has %v)", b, a)
	}
	for _, addr := range []string{"198.19.255.255", "198.18.0.1", "203.0.113.7"} {
		if h, ok := n.Host(netip.MustParseAddr(addr)); ok {
			t.Errorf("Host(%s) = %q, an address no name was given", addr, h)
		}
	}
	var none *RefusedNames
	if h, ok := none.Host(a); ok {
		t.Errorf("a nil RefusedNames names %v: %q", a, h)
	}
}

// However many names a sandbox is refused, the map holds MaxRefusedNames at most: the name
// answered longest ago gives its address to the next one, and a name asked for again keeps its.
func TestRefusedNamesBound(t *testing.T) {
	var n RefusedNames
	name := func(i int) string { return fmt.Sprintf("n%d.example.test", i) }
	seen := map[netip.Addr]bool{}
	for i := range MaxRefusedNames {
		a := n.Addr(name(i))
		if !RefusedPrefix.Contains(a) || seen[a] {
			t.Fatalf("name %d got %v: outside %v or given before", i, a, RefusedPrefix)
		}
		seen[a] = true
	}
	first := n.Addr(name(0)) // asked again: now the most recent
	second := n.Addr(name(1))
	n.Addr(name(0))
	thirdAddr := n.byHost[name(2)].Value.(*refusedName).addr

	// Full: the next name takes the address of the one answered longest ago, name 2.
	if a := n.Addr("new.example.test"); a != thirdAddr {
		t.Fatalf("a name past the bound got %v, want %v (the least recently answered name's)", a, thirdAddr)
	}
	if h, _ := n.Host(thirdAddr); h != "new.example.test" {
		t.Fatalf("Host(%v) = %q after it was given again", thirdAddr, h)
	}
	if a := n.Addr(name(0)); a != first {
		t.Fatalf("a name asked for again lost its address: %v, was %v", a, first)
	}
	if a := n.Addr(name(1)); a != second {
		t.Fatalf("name 1 lost its address: %v, was %v", a, second)
	}
	for i := range 10 * MaxRefusedNames {
		if a := n.Addr(fmt.Sprintf("flood%d.example.test", i)); !RefusedPrefix.Contains(a) {
			t.Fatalf("flood %d got %v", i, a)
		}
	}
	if len(n.byHost) != MaxRefusedNames || len(n.byAddr) != MaxRefusedNames || n.order.Len() != MaxRefusedNames {
		t.Fatalf("after %d names: %d hosts, %d addresses, %d in order; want %d of each",
			11*MaxRefusedNames, len(n.byHost), len(n.byAddr), n.order.Len(), MaxRefusedNames)
	}
	for a, e := range n.byAddr {
		rn := e.Value.(*refusedName)
		if rn.addr != a || n.byHost[rn.host] != e {
			t.Fatalf("%v: the maps disagree: %+v", a, rn)
		}
	}
}

// A name the policy refuses resolves to an address that stands for the refusal: an A record
// with a one-second TTL, no AAAA (nor any other record), and the audit says it was refused.
func TestResolverRefusedName(t *testing.T) {
	f := &fakeHost{}
	var hp atomicPolicy
	hp.set(mustPolicy(t, true, []string{"real.example.test"}, []string{"*.ads.test"}))
	var records recorder
	refused := &RefusedNames{}
	r := &Resolver{Names: NewNames(testRoutes), Lookup: f.lookup, Sandbox: "sb1", Policy: hp.get, Audit: records.add, Refused: refused}
	udp, _ := serve(t, r)
	c := dial(t, "udp", udp)
	id := uint16(0)
	ask := func(name string, typ dnsmessage.Type) dnsmessage.Message {
		t.Helper()
		id++
		return c.exchange(id, question(name, typ), 0)
	}

	m := ask("rebind.example.test.", dnsmessage.TypeA)
	if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
		t.Fatalf("A: %v %v, want one address", m.RCode, addrs(m))
	}
	a := netip.AddrFrom4(m.Answers[0].Body.(*dnsmessage.AResource).A)
	if !RefusedPrefix.Contains(a) || m.Answers[0].Header.TTL != refusedTTL {
		t.Fatalf("A: %v with TTL %d, want an address of %v with TTL %d", a, m.Answers[0].Header.TTL, RefusedPrefix, refusedTTL)
	}
	if h, ok := refused.Host(a); !ok || h != "rebind.example.test" {
		t.Fatalf("the proxy's side: Host(%v) = %q, %v", a, h, ok)
	}
	if m := ask("REBIND.example.test.", dnsmessage.TypeA); len(m.Answers) != 1 || m.Answers[0].Body.(*dnsmessage.AResource).A != a.As4() {
		t.Fatalf("asked again: %v, want %v", addrs(m), a)
	}
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeAAAA, dnsmessage.TypeHTTPS, dnsmessage.TypeSRV, dnsmessage.TypeMX} {
		if m := ask("rebind.example.test.", typ); m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 {
			t.Errorf("%v: %v %v, want an empty answer", typ, m.RCode, addrs(m))
		}
	}
	if f.called("rebind.example.test") {
		t.Error("the host's resolver was asked for a name the policy refuses")
	}
	rec := records.find("rebind.example.test")
	if rec == nil || rec.Allowed || rec.Rule != "egress closed: rebind.example.test is not allowed" ||
		rec.QueryType != "A" || !slices.Equal(rec.Answers, []netip.Addr{a}) {
		t.Fatalf("record %+v", rec)
	}

	// A deny rule, in an open sandbox too.
	hp.set(mustPolicy(t, false, nil, []string{"*.ads.test"}))
	m = ask("x.ads.test.", dnsmessage.TypeA)
	if got := addrs(m); m.RCode != dnsmessage.RCodeSuccess || len(got) != 1 || got[0] == a.String() || !RefusedPrefix.Contains(netip.MustParseAddr(got[0])) {
		t.Fatalf("denied name: %v %v, want another address of %v", m.RCode, got, RefusedPrefix)
	}
	if rec := records.find("x.ads.test"); rec == nil || rec.Allowed || rec.Rule != "egress deny *.ads.test" {
		t.Fatalf("record %+v", rec)
	}
	// A name no client could send in a Host or SNI has no address: NXDOMAIN.
	if m := ask("bad name.ads.test.", dnsmessage.TypeA); m.RCode != dnsmessage.RCodeNameError {
		t.Errorf("a name that is not a host name: %v %v, want NXDOMAIN", m.RCode, addrs(m))
	}
	// Opened: the real addresses.
	hp.set(nil)
	if m := ask("rebind.example.test.", dnsmessage.TypeA); strings.Join(addrs(m), ",") != "203.0.113.8" {
		t.Errorf("after opening: %v %v", m.RCode, addrs(m))
	}

	// A resolver without RefusedNames answers NXDOMAIN, as it has nothing to point at.
	hp.set(mustPolicy(t, true, nil, nil))
	bare := &Resolver{Lookup: f.lookup, Sandbox: "sb1", Policy: hp.get}
	udp2, _ := serve(t, bare)
	if m := dial(t, "udp", udp2).exchange(1, question("rebind.example.test.", dnsmessage.TypeA), 0); m.RCode != dnsmessage.RCodeNameError {
		t.Errorf("without RefusedNames: %v %v, want NXDOMAIN", m.RCode, addrs(m))
	}
}

// Go's resolver, as a client of the sandbox's resolver, gets the one IPv4 address.
func TestResolverRefusedNameGoClient(t *testing.T) {
	var hp atomicPolicy
	hp.set(mustPolicy(t, true, nil, nil))
	refused := &RefusedNames{}
	udp, _ := serve(t, &Resolver{Lookup: (&fakeHost{}).lookup, Policy: hp.get, Refused: refused})
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", udp)
	}}
	got, err := res.LookupNetIP(context.Background(), "ip", "real.example.test.")
	if err != nil || len(got) != 1 || got[0].Unmap() != refused.Addr("real.example.test") {
		t.Fatalf("LookupNetIP = %v, %v; want the refused name's address %v", got, err, refused.Addr("real.example.test"))
	}
}

// A connection to the address of a refused name hears the refusal: an HTTP request the explicit
// proxy's own 403 and text, a ClientHello an access_denied alert, anything else a reset; each is
// audited with the name. A live change that allows the name lets a connection that names it
// through; one that names nothing is still refused, and told to resolve the name again.
func TestProxyRefusedAddress(t *testing.T) {
	refused := &RefusedNames{}
	h := newHarness(t, func(p *Proxy) { p.Refused = refused })
	h.p.SetHostPolicy(mustPolicy(t, true, []string{"api.example.test:443"}, nil))
	a := refused.Addr("other.example.test") // as the resolver answers it
	at := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
	const rule80, rule443, rule22 = "egress closed: other.example.test:80 is not allowed",
		"egress closed: other.example.test:443 is not allowed", "egress closed: other.example.test:22 is not allowed"

	// HTTP: the explicit proxy's answer, word for word, and the connection closed after it.
	status, explicitBody := rawHTTP(t, h.dialExplicit(), "GET http://other.example.test/ HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
	if status != http.StatusForbidden {
		t.Fatalf("explicit: %d %s", status, explicitBody)
	}
	h.record("explicit", byHost(KindProxyHTTP, "other.example.test"))
	c := h.dialTransparent(at(80))
	io.WriteString(c, "GET /dists/trixie/InRelease HTTP/1.1\r\nHost: other.example.test\r\nUser-Agent: Debian APT-HTTP/1.3\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || string(body) != explicitBody || !resp.Close {
		t.Fatalf("captured: %s, Connection: close %v, %q; want 403, closed, the explicit proxy's %q", resp.Status, resp.Close, body, explicitBody)
	}
	wantBody(t, string(body), "hiloop gateway: "+rule80, "hiloop sandbox egress sb1")
	if rest, err := io.ReadAll(br); len(rest) != 0 || err != nil {
		t.Fatalf("after the 403: %q, %v; want the end of the stream", rest, err)
	}
	if r := h.record("http", byHost(KindHTTP, "other.example.test")); r.Allowed || r.Port != 80 || r.Rule != rule80 {
		t.Fatalf("http: record %+v", r)
	}

	// TLS: an access_denied alert, which a TLS client reports as such.
	wantAlert(t, h.dialTransparent(at(443)), clientHello(t, "other.example.test"))
	if r := h.record("tls", byHost(KindTLS, "other.example.test")); r.Allowed || r.Port != 443 || r.Rule != rule443 {
		t.Fatalf("tls: record %+v", r)
	}
	err = tls.Client(h.dialTransparent(at(443)), &tls.Config{ServerName: "other.example.test"}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("a Go TLS client's handshake: %v, want access denied", err)
	}
	h.record("tls handshake", byHost(KindTLS, "other.example.test"))

	// Nothing names a host: the name the address stands for is refused and audited.
	wantAlert(t, h.dialTransparent(at(443)), clientHello(t, ""))
	if r := h.record("tls without SNI", byHost(KindTLS, "other.example.test")); r.Allowed || r.Rule != rule443 {
		t.Fatalf("tls without SNI: record %+v", r)
	}
	wantReset(t, h.dialTransparent(at(22)), []byte("SSH-2.0-OpenSSH_9.2\r\n"))
	if r := h.record("tcp", byHost(KindTCP, "other.example.test")); r.Allowed || r.Port != 22 || r.Rule != rule22 {
		t.Fatalf("tcp: record %+v", r)
	}
	status, body10 := rawHTTP(t, h.dialTransparent(at(80)), "GET / HTTP/1.0\r\n\r\n")
	if status != http.StatusForbidden || !strings.Contains(body10, rule80) {
		t.Fatalf("HTTP/1.0 without Host: %d %s", status, body10)
	}
	if r := h.record("http without Host", byHost(KindHTTP, "other.example.test")); r.Allowed || r.Rule != rule80 {
		t.Fatalf("http without Host: record %+v", r)
	}
	// An address of the range that stands for no name (the daemon restarted since it was
	// answered) is refused all the same.
	const unknown = "which name it stood for is no longer known"
	wantReset(t, h.dialTransparent(netip.MustParseAddrPort("198.19.255.255:22")), []byte{0, 1, 2})
	if r := h.record("unknown address", func(r Record) bool { return r.Kind == KindTCP && r.Port == 22 && r.Host == "" }); r.Allowed || !strings.Contains(r.Rule, unknown) {
		t.Fatalf("unknown address: record %+v", r)
	}
	// The explicit proxy refuses the addresses too.
	status, cbody := rawHTTP(t, h.dialExplicit(), "CONNECT "+at(443).String()+" HTTP/1.1\r\nHost: x\r\n\r\n")
	if status != http.StatusForbidden || !strings.Contains(cbody, rule443) {
		t.Fatalf("CONNECT to the address: %d %s", status, cbody)
	}
	h.record("connect", func(r Record) bool { return r.Kind == KindConnect })

	// Allowed now (closed with an allow rule, then open once a deny rule refused it): a request
	// that names the host goes through, decided by that name; one that names none is refused.
	again := "its address " + a.String() + " stood for its refusal when it was resolved; the egress policy allows it now: resolve it again"
	for _, change := range []struct{ before, after *HostPolicy }{
		{h.p.HostPolicy(), mustPolicy(t, true, []string{"other.example.test"}, nil)},
		{mustPolicy(t, false, nil, []string{"other.example.test"}), nil},
	} {
		h.p.SetHostPolicy(change.before)
		status, body := rawHTTP(t, h.dialTransparent(at(80)), "GET /now HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
		if status != http.StatusForbidden {
			t.Fatalf("before the change: %d %s", status, body)
		}
		h.record("before the change", byHost(KindHTTP, "other.example.test"))
		h.p.SetHostPolicy(change.after)
		status, body = rawHTTP(t, h.dialTransparent(at(80)), "GET /now HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
		if status != 200 {
			t.Fatalf("allowed: %d %s", status, body)
		}
		wantBody(t, body, "host=other.example.test", "path=/now")
		h.record("allowed", byHost(KindHTTP, "other.example.test"))
		status, body = rawHTTP(t, h.dialTransparent(at(80)), "GET / HTTP/1.0\r\n\r\n")
		if status != http.StatusForbidden || !strings.Contains(body, "other.example.test:80 is refused: "+again) {
			t.Fatalf("allowed, no Host: %d %s", status, body)
		}
		if r := h.record("allowed, no Host", byHost(KindHTTP, "other.example.test")); r.Allowed || r.Rule != again {
			t.Fatalf("allowed, no Host: record %+v", r)
		}
	}
}

// A refusal tells the sandbox's owner the command they type: the sandbox's bare name, not the
// daemon's key of it (USER.NAME for a user other than the local admin).
func TestRefusalNamesTheSandboxAsItsOwnerDoes(t *testing.T) {
	for _, key := range []string{"web", "bob.web"} {
		p := &Proxy{Sandbox: key}
		rec := &Record{}
		status, msg := p.refusal(&HostDenied{Host: "x.example.test", Port: 443, Rule: "egress closed"}, rec)
		if status != http.StatusForbidden || !strings.Contains(msg, "`hiloop sandbox egress web`") || rec.Allowed {
			t.Errorf("sandbox %s: %d %q, want 403 naming `hiloop sandbox egress web`", key, status, msg)
		}
	}
}
