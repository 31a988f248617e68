package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func mustPolicy(t *testing.T, closed bool, allow, deny []string) *HostPolicy {
	t.Helper()
	hp := &HostPolicy{Closed: closed}
	for _, s := range allow {
		r, err := ParseHostRule(s)
		if err != nil {
			t.Fatal(err)
		}
		hp.Allow = append(hp.Allow, r)
	}
	for _, s := range deny {
		r, err := ParseHostRule(s)
		if err != nil {
			t.Fatal(err)
		}
		hp.Deny = append(hp.Deny, r)
	}
	return hp
}

func TestParseHostRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want HostRule
	}{
		{"api.example.com", HostRule{Host: "api.example.com"}},
		{"API.example.com.:443", HostRule{Host: "api.example.com", Port: 443}},
		{"*.example.com", HostRule{Host: "*.example.com"}},
		{"*.example.com:8080", HostRule{Host: "*.example.com", Port: 8080}},
		{"203.0.113.7", HostRule{Host: "203.0.113.7"}},
		{"203.0.113.7:22", HostRule{Host: "203.0.113.7", Port: 22}},
		{"2001:db8::1", HostRule{Host: "2001:db8::1"}},
		{"[2001:db8::1]", HostRule{Host: "2001:db8::1"}},
		{"[2001:db8::1]:443", HostRule{Host: "2001:db8::1", Port: 443}},
	} {
		got, err := ParseHostRule(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseHostRule(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if again, err := ParseHostRule(got.String()); err != nil || again != got {
			t.Errorf("ParseHostRule(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
	for _, bad := range []string{"", ":443", "x:0", "x:70000", "x:y", "*.", "a.*.b", "*"} {
		if r, err := ParseHostRule(bad); err == nil {
			t.Errorf("ParseHostRule(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestHostPolicyCheck(t *testing.T) {
	closed := func(allow ...string) *HostPolicy { return mustPolicy(t, true, allow, nil) }
	open := func(deny ...string) *HostPolicy { return mustPolicy(t, false, nil, deny) }
	for _, tc := range []struct {
		name string
		p    *HostPolicy
		host string
		port uint16
		rule string // "" when allowed
	}{
		{"nil is open", nil, "anything.test", 443, ""},
		{"zero is open", &HostPolicy{}, "anything.test", 443, ""},
		{"open, nothing denied", open("x.test"), "api.example.com", 443, ""},
		{"open, exact deny", open("api.example.com"), "api.example.com", 443, "egress deny api.example.com"},
		{"deny is case-blind", open("api.example.com"), "API.Example.com.", 443, "egress deny api.example.com"},
		{"deny on another port", open("api.example.com:80"), "api.example.com", 443, ""},
		{"deny on its port", open("api.example.com:80"), "api.example.com", 80, "egress deny api.example.com:80"},
		{"wildcard denies a subdomain", open("*.example.com"), "api.example.com", 443, "egress deny *.example.com"},
		{"wildcard denies any depth", open("*.example.com"), "a.b.example.com", 443, "egress deny *.example.com"},
		{"wildcard spares the apex", open("*.example.com"), "example.com", 443, ""},
		{"wildcard spares a lookalike", open("*.example.com"), "badexample.com", 443, ""},
		{"wildcard matches no address", open("*.7"), "203.0.113.7", 443, ""},
		{"open, address deny", open("203.0.113.7"), "203.0.113.7", 22, "egress deny 203.0.113.7"},
		{"open, mapped address deny", open("203.0.113.7"), "::ffff:203.0.113.7", 22, "egress deny 203.0.113.7"},
		{"ipv6 deny", open("[2001:db8::1]:443"), "[2001:DB8::1]", 443, "egress deny [2001:db8::1]:443"},

		{"closed, allowed", closed("api.example.com"), "api.example.com", 443, ""},
		{"closed, allowed on any port", closed("api.example.com"), "api.example.com", 8443, ""},
		{"closed, not allowed", closed("api.example.com"), "other.example.com", 443, "egress closed: other.example.com:443 is not allowed"},
		{"closed, wrong port", closed("api.example.com:443"), "api.example.com", 80, "egress closed: api.example.com:80 is not allowed"},
		{"closed, right port", closed("api.example.com:443"), "api.example.com", 443, ""},
		{"closed, wildcard", closed("*.example.com"), "x.example.com", 443, ""},
		{"closed, wildcard not apex", closed("*.example.com"), "example.com", 443, "egress closed: example.com:443 is not allowed"},
		{"closed, an address by name rule", closed("api.example.com"), "203.0.113.7", 443, "egress closed: 203.0.113.7:443 is not allowed"},
		{"closed, an allowed address", closed("203.0.113.7"), "203.0.113.7", 22, ""},
		{"closed, an allowed address, wrong port", closed("203.0.113.7:443"), "203.0.113.7", 22, "egress closed: 203.0.113.7:22 is not allowed"},
		{"closed, ipv6", closed("2001:db8::1"), "2001:db8::1", 22, ""},
		{"closed, ipv6 refused", closed(), "2001:db8::2", 22, "egress closed: [2001:db8::2]:22 is not allowed"},
		{"closed with nothing", closed(), "api.example.com", 443, "egress closed: api.example.com:443 is not allowed"},

		{"deny wins over allow", mustPolicy(t, true, []string{"*.example.com"}, []string{"secret.example.com"}), "secret.example.com", 443, "egress deny secret.example.com"},
		{"deny wins over an exact allow", mustPolicy(t, true, []string{"api.example.com"}, []string{"*.example.com"}), "api.example.com", 443, "egress deny *.example.com"},
		{"the allowed rest", mustPolicy(t, true, []string{"*.example.com"}, []string{"secret.example.com"}), "api.example.com", 443, ""},
	} {
		err := tc.p.Check(tc.host, tc.port)
		var hd *HostDenied
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s: Check(%s, %d) = %v, want allowed", tc.name, tc.host, tc.port, err)
		case tc.rule != "" && (!errors.As(err, &hd) || hd.Rule != tc.rule):
			t.Errorf("%s: Check(%s, %d) = %v, want the rule %q", tc.name, tc.host, tc.port, err, tc.rule)
		}
	}
}

func TestHostPolicyCheckName(t *testing.T) {
	p := mustPolicy(t, true, []string{"api.example.com:443", "*.github.com"}, []string{"gist.github.com", "raw.github.com:80"})
	for host, rule := range map[string]string{
		"api.example.com":   "", // on port 443
		"x.github.com":      "",
		"raw.github.com":    "", // denied on port 80 only
		"gist.github.com":   "egress deny gist.github.com",
		"other.example.com": "egress closed: other.example.com is not allowed",
		"github.com":        "egress closed: github.com is not allowed",
	} {
		err := p.CheckName(host)
		var hd *HostDenied
		if rule == "" && err != nil || rule != "" && (!errors.As(err, &hd) || hd.Rule != rule) {
			t.Errorf("CheckName(%s) = %v, want %q", host, err, rule)
		}
	}
	if err := mustPolicy(t, false, nil, []string{"*.example.com"}).CheckName("example.com"); err != nil {
		t.Errorf("open: the apex of a wildcard deny is refused: %v", err)
	}
	if err := (*HostPolicy)(nil).CheckName("x.test"); err != nil {
		t.Errorf("nil policy: %v", err)
	}
}

// The policy decides every kind of connection by the name asked for, and, for a connection
// with no name, by its address; a refusal is a 403 where the protocol has one, else a reset.
func TestProxyHostPolicy(t *testing.T) {
	h := newHarness(t, func(p *Proxy) {
		p.Policy = &AddrPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Local: noLocal}
	})
	echo := addrPortOf(h.u.echo.Addr())
	h.p.SetHostPolicy(mustPolicy(t, true, []string{"api.example.test:443", "web.example.test", echo.Addr().String() + ":" + strconv.Itoa(int(echo.Port()))}, nil))

	// Allowed: TLS by SNI, HTTP by Host, CONNECT, forward, and a raw connection by address.
	tlsc := h.transparentClient(netip.AddrPortFrom(public, 443), tlsConfig(h))
	if status, body := get(t, tlsc, "https://api.example.test/ok"); status != 200 {
		t.Fatalf("allowed TLS: %d %s", status, body)
	}
	if status, body := get(t, h.transparentClient(netip.AddrPortFrom(public, 80), nil), "http://web.example.test/ok"); status != 200 {
		t.Fatalf("allowed HTTP: %d %s", status, body)
	}
	if status, body := get(t, h.explicitClient(), "https://api.example.test/ok"); status != 200 {
		t.Fatalf("allowed CONNECT: %d %s", status, body)
	}
	if status, body := get(t, h.explicitClient(), "http://web.example.test/ok"); status != 200 {
		t.Fatalf("allowed forward: %d %s", status, body)
	}
	c := h.dialTransparent(echo)
	if sent, got := exchange(t, c, 1000); sent != got {
		t.Fatal("allowed raw connection: the echo differs")
	}

	const refusedRule = "egress closed: other.example.test:80 is not allowed"
	for _, tc := range []struct {
		name string
		dst  string // a transparent connection to it; "" = the explicit proxy
		send string
		kind string
		host string
		rule string
	}{
		{"http", public.String() + ":80", "GET / HTTP/1.1\r\nHost: other.example.test\r\n\r\n", KindHTTP, "other.example.test", refusedRule},
		{"forward", "", "GET http://other.example.test/ HTTP/1.1\r\nHost: other.example.test\r\n\r\n", KindProxyHTTP, "other.example.test", refusedRule},
		{"connect", "", "CONNECT other.example.test:80 HTTP/1.1\r\nHost: other.example.test:80\r\n\r\n", KindConnect, "other.example.test", refusedRule},
		{"connect wrong port", "", "CONNECT api.example.test:8443 HTTP/1.1\r\nHost: x\r\n\r\n", KindConnect, "api.example.test", "egress closed: api.example.test:8443 is not allowed"},
		{"http synthetic", "198.18.0.2:8080", "GET / HTTP/1.0\r\n\r\n", KindHTTP, "web.example.test", ""}, // allowed on any port: refused by the upstream instead
	} {
		var c net.Conn
		if tc.dst == "" {
			c = h.dialExplicit()
		} else {
			c = h.dialTransparent(netip.MustParseAddrPort(tc.dst))
		}
		status, body := rawHTTP(t, c, tc.send)
		if tc.rule == "" {
			if status == http.StatusForbidden {
				t.Fatalf("%s: refused: %s", tc.name, body)
			}
			h.record(tc.name, byHost(tc.kind, tc.host))
			continue
		}
		if status != http.StatusForbidden {
			t.Fatalf("%s: status %d: %s", tc.name, status, body)
		}
		wantBody(t, body, "hiloop gateway: ", tc.rule, "hiloop sandbox egress sb1")
		r := h.record(tc.name, byHost(tc.kind, tc.host))
		if r.Allowed || r.Rule != tc.rule || r.Addr.IsValid() || r.BytesUp != 0 || r.BytesDown != 0 {
			t.Fatalf("%s: record %+v", tc.name, r)
		}
	}

	// TLS gets an access_denied alert, a raw connection a reset.
	wantAlert(t, h.dialTransparent(netip.AddrPortFrom(public, 443)), clientHello(t, "other.example.test"))
	if r := h.record("refused TLS", byHost(KindTLS, "other.example.test")); r.Allowed || r.Rule != "egress closed: other.example.test:443 is not allowed" {
		t.Fatalf("record %+v", r)
	}
	sum := addrPortOf(h.u.sum.Addr())
	wantReset(t, h.dialTransparent(sum), []byte("x"))
	if r := h.record("refused raw", func(r Record) bool { return r.Kind == KindTCP && !r.Allowed }); r.Rule != "egress closed: "+sum.String()+" is not allowed" {
		t.Fatalf("record %+v", r)
	}
}

func tlsConfig(h *harness) *tls.Config { return &tls.Config{RootCAs: h.u.caPool} }

// atomicPolicy is a policy a test changes while a Resolver reads it.
type atomicPolicy struct{ p atomic.Pointer[HostPolicy] }

func (a *atomicPolicy) set(p *HostPolicy) { a.p.Store(p) }
func (a *atomicPolicy) get() *HostPolicy  { return a.p.Load() }

// recorder keeps audit records.
type recorder struct {
	mu   sync.Mutex
	recs []Record
}

func (r *recorder) add(rec Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *recorder) find(host string) *Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.recs {
		if r.recs[i].Host == host {
			return &r.recs[i]
		}
	}
	return nil
}

// A live change applies to the next connection and the next request, also one that would
// reuse a kept-alive upstream connection or come through a plain-HTTP tunnel opened before.
func TestProxyHostPolicyLiveChange(t *testing.T) {
	h := newHarness(t, nil)
	h.p.SetHostPolicy(mustPolicy(t, true, []string{"web.example.test"}, nil))
	c := h.explicitClient()
	if status, _ := get(t, c, "http://other.example.test/"); status != http.StatusForbidden {
		t.Fatalf("before the change: status %d, want 403", status)
	}
	if status, _ := get(t, c, "http://web.example.test/"); status != 200 {
		t.Fatalf("before the change: web status %d", status)
	}

	// A tunnel opened now survives the change.
	tunnel := h.dialExplicit()
	io.WriteString(tunnel, "CONNECT web.example.test:80 HTTP/1.1\r\nHost: web.example.test:80\r\n\r\n")
	buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
	if _, err := io.ReadFull(tunnel, buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
		t.Fatalf("tunnel: %q %v", buf, err)
	}

	h.p.SetHostPolicy(mustPolicy(t, true, []string{"other.example.test"}, nil))
	if status, body := get(t, c, "http://other.example.test/"); status != 200 {
		t.Fatalf("after the change: status %d: %s", status, body)
	}
	// web's connection is pooled in the proxy's transport, but the request is decided anew.
	status, body := get(t, c, "http://web.example.test/")
	if status != http.StatusForbidden || !strings.Contains(body, "egress closed: web.example.test:80 is not allowed") {
		t.Fatalf("after the change: web status %d: %s", status, body)
	}

	// Plain HTTP in a tunnel is read request by request, and each is decided anew.
	io.WriteString(tunnel, "GET /still HTTP/1.1\r\nHost: web.example.test\r\nConnection: close\r\n\r\n")
	b, _ := io.ReadAll(tunnel)
	wantBody(t, string(b), "403 Forbidden", "egress closed: web.example.test:80 is not allowed")

	h.p.SetHostPolicy(nil)
	if status, _ := get(t, c, "http://web.example.test/"); status != 200 {
		t.Fatalf("open again: status %d", status)
	}
}

// In a closed sandbox, names the policy refuses do not resolve; the resolver follows a live
// change at once.
func TestResolverHostPolicy(t *testing.T) {
	f := &fakeHost{}
	var hp atomicPolicy
	hp.set(mustPolicy(t, true, []string{"real.example.test:443", "routed.test"}, []string{"*.ads.test"}))
	var records recorder
	r := &Resolver{Names: NewNames([]Route{{Host: "routed.test", Port: 443, To: netip.MustParseAddrPort("127.0.0.1:1")},
		{Host: "blocked.test", Port: 443, To: netip.MustParseAddrPort("127.0.0.1:1")}}),
		Lookup: f.lookup, Sandbox: "sb1", Policy: hp.get, Audit: records.add}
	udp, _ := serve(t, r)
	c := dial(t, "udp", udp)
	id := uint16(0)
	ask := func(name string) dnsmessage.Message {
		id++
		return c.exchange(id, question(name+".", dnsmessage.TypeA), 0)
	}
	for name, want := range map[string]string{
		"real.example.test":   "203.0.113.7",
		"routed.test":         "198.18.0.1",
		"localhost":           "127.0.0.1",
		"rebind.example.test": "",
		"blocked.test":        "",
		"x.ads.test":          "",
	} {
		m := ask(name)
		got := strings.Join(addrs(m), ",")
		if want == "" {
			if m.RCode != dnsmessage.RCodeNameError {
				t.Errorf("%s: %v %s, want NXDOMAIN", name, m.RCode, got)
			}
			continue
		}
		if m.RCode != dnsmessage.RCodeSuccess || got != want {
			t.Errorf("%s: %v %s, want %s", name, m.RCode, got, want)
		}
	}
	if f.called("rebind.example.test") {
		t.Error("the host's resolver was asked for a name the policy refuses")
	}
	rec := records.find("rebind.example.test")
	if rec == nil || rec.Allowed || rec.Rule != "egress closed: rebind.example.test is not allowed" {
		t.Errorf("record %+v", rec)
	}
	if rec := records.find("x.ads.test"); rec == nil || rec.Rule != "egress deny *.ads.test" {
		t.Errorf("record %+v", rec)
	}

	hp.set(mustPolicy(t, false, nil, nil))
	if m := ask("rebind.example.test"); m.RCode != dnsmessage.RCodeSuccess || strings.Join(addrs(m), ",") != "203.0.113.8" {
		t.Errorf("after opening: %v %v", m.RCode, addrs(m))
	}
}

// A deny rule on an address refuses that address however it was reached: asked for, resolved
// to, or carried by a NAT64 or 6to4 address; a rule with a port only on that port, and a DNS
// answer (port 0) only by a rule for every port.
func TestHostPolicyCheckAddr(t *testing.T) {
	hp := mustPolicy(t, false, []string{"203.0.113.9"}, []string{"203.0.113.66", "203.0.113.77:443", "2001:db8::66", "*.example.test"})
	for _, tc := range []struct {
		host, addr string
		port       uint16
		rule       string // "" = nil
		told       string // in what the sandbox is told
	}{
		{"pub.test", "203.0.113.66", 80, "egress deny 203.0.113.66", "pub.test:80 is refused: it resolves to an address an egress deny rule names"},
		{"pub.test", "::ffff:203.0.113.66", 443, "egress deny 203.0.113.66", "resolves to an address"},
		{"pub.test", "64:ff9b::cb00:7142", 443, "egress deny 203.0.113.66", "resolves to an address"},
		{"pub.test", "2002:cb00:7142::1", 443, "egress deny 203.0.113.66", "resolves to an address"},
		{"pub.test", "2001:db8::66", 443, "egress deny 2001:db8::66", "resolves to an address"},
		{"pub.test", "203.0.113.66", 0, "egress deny 203.0.113.66", "pub.test is refused"},
		{"", "203.0.113.66", 22, "egress deny 203.0.113.66", "203.0.113.66:22 is refused: egress deny 203.0.113.66"},
		{"", "64:ff9b::cb00:7142", 22, "egress deny 203.0.113.66", "[64:ff9b::cb00:7142]:22 is refused: egress deny 203.0.113.66"},
		{"pub.test", "203.0.113.77", 443, "egress deny 203.0.113.77:443", "resolves to an address"},
		{"pub.test", "203.0.113.77", 80, "", ""},
		{"pub.test", "203.0.113.77", 0, "", ""},
		{"pub.test", "203.0.113.9", 80, "", ""},        // allow rules are not consulted
		{"x.example.test", "203.0.113.10", 80, "", ""}, // nor name rules
	} {
		err := hp.CheckAddr(tc.host, netip.MustParseAddr(tc.addr), tc.port)
		var hd *HostDenied
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s %s %d: %v, want nil", tc.host, tc.addr, tc.port, err)
		case tc.rule == "":
		case !errors.As(err, &hd) || hd.Rule != tc.rule || !strings.Contains(hd.Error(), tc.told):
			t.Errorf("%s %s %d: %v (%+v), want rule %q, told %q", tc.host, tc.addr, tc.port, err, hd, tc.rule, tc.told)
		case tc.host != "" && strings.Contains(hd.Error(), tc.addr):
			t.Errorf("%s %s %d: the sandbox is told the address: %q", tc.host, tc.addr, tc.port, hd.Error())
		}
	}
	if err := (*HostPolicy)(nil).CheckAddr("pub.test", netip.MustParseAddr("203.0.113.66"), 80); err != nil {
		t.Errorf("nil policy: %v", err)
	}
}

// ECH hides the server a ClientHello is for behind a cover name: refused in a closed sandbox.
func TestHostPolicyCheckECH(t *testing.T) {
	var hd *HostDenied
	if err := mustPolicy(t, true, []string{"cover.test"}, nil).CheckECH("cover.test", 443); !errors.As(err, &hd) ||
		hd.Rule != "egress closed: a TLS ClientHello with encrypted_client_hello (ECH) to cover.test:443 hides the server it is for" {
		t.Errorf("closed: %v", err)
	}
	if err := mustPolicy(t, false, nil, []string{"other.test"}).CheckECH("cover.test", 443); err != nil {
		t.Errorf("open: %v", err)
	}
	if err := (*HostPolicy)(nil).CheckECH("cover.test", 443); err != nil {
		t.Errorf("nil: %v", err)
	}
}

// The proxy applies a deny rule on an address to the addresses a name resolves to; in a closed
// sandbox an allow rule on an address lets through only that address asked for, not a name
// that resolves to it.
func TestProxyAddressRules(t *testing.T) {
	var mu sync.Mutex
	var dialled []string
	var web string
	h := newHarness(t, func(p *Proxy) {
		fake := p.Lookup
		p.Lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			switch host {
			case "pub.example.test":
				return []netip.Addr{netip.MustParseAddr("203.0.113.66")}, nil
			case "pub6.example.test":
				return []netip.Addr{netip.MustParseAddr("64:ff9b::203.0.113.66")}, nil
			case "two.example.test":
				return []netip.Addr{netip.MustParseAddr("203.0.113.66"), netip.MustParseAddr("203.0.113.67")}, nil
			}
			return fake(ctx, host)
		}
		// Every public address is the web server, so nothing leaves this machine.
		p.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dialled = append(dialled, addr)
			to := web
			mu.Unlock()
			if netip.MustParseAddrPort(addr).Addr().IsLoopback() {
				to = addr // a route's target
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		}
	})
	mu.Lock()
	web = serverAddr(h.u.web).String()
	mu.Unlock()
	lastDialled := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(dialled) == 0 {
			return ""
		}
		return dialled[len(dialled)-1]
	}
	c := h.explicitClient()
	forward := func(host string) (int, string) {
		t.Helper()
		return get(t, c, "http://"+host+"/")
	}

	// A connection pooled while the address was allowed is not used once a rule denies it.
	if status, body := forward("pub.example.test"); status != 200 || lastDialled() != "203.0.113.66:80" {
		t.Fatalf("pub, open: %d %s, dialled %s", status, body, lastDialled())
	}
	h.record("pub, open", byHost(KindProxyHTTP, "pub.example.test"))

	// Open, deny 203.0.113.66.
	h.p.SetHostPolicy(mustPolicy(t, false, nil, []string{"203.0.113.66"}))
	for _, host := range []string{"pub.example.test", "pub6.example.test"} {
		status, body := forward(host)
		if status != http.StatusForbidden || !strings.Contains(body, host+":80 is refused: it resolves to an address an egress deny rule names") ||
			strings.Contains(body, "203.0.113.66") || strings.Contains(body, "cb00") {
			t.Fatalf("%s: %d %s", host, status, body)
		}
		r := h.record(host, byHost(KindProxyHTTP, host))
		if r.Allowed || r.Rule != "egress deny 203.0.113.66" || !r.Addr.IsValid() {
			t.Fatalf("%s: record %+v", host, r)
		}
	}
	wantAlert(t, h.dialTransparent(netip.AddrPortFrom(public, 443)), clientHello(t, "pub.example.test"))
	if r := h.record("tls", byHost(KindTLS, "pub.example.test")); r.Allowed || r.Rule != "egress deny 203.0.113.66" || r.Addr.String() != "203.0.113.66:443" {
		t.Fatalf("tls: record %+v", r)
	}
	// A name with another address goes there.
	if status, body := forward("two.example.test"); status != 200 || lastDialled() != "203.0.113.67:80" {
		t.Fatalf("two: %d %s, dialled %s", status, body, lastDialled())
	}
	h.record("two", byHost(KindProxyHTTP, "two.example.test"))
	// A rule on another port leaves this one alone.
	h.p.SetHostPolicy(mustPolicy(t, false, nil, []string{"203.0.113.66:443"}))
	if status, body := forward("pub.example.test"); status != 200 || lastDialled() != "203.0.113.66:80" {
		t.Fatalf("port 443 denied, 80 asked: %d %s, dialled %s", status, body, lastDialled())
	}
	h.record("pub on 80", byHost(KindProxyHTTP, "pub.example.test"))

	// Closed, allow the address: the address asked for passes, a name resolving to it does not.
	h.p.SetHostPolicy(mustPolicy(t, true, []string{"203.0.113.66", "two.example.test"}, nil))
	if status, body := forward("203.0.113.66"); status != 200 {
		t.Fatalf("closed, the allowed address: %d %s", status, body)
	}
	if status, body := forward("pub.example.test"); status != http.StatusForbidden || !strings.Contains(body, "egress closed: pub.example.test:80 is not allowed") {
		t.Fatalf("closed, a name resolving to the allowed address: %d %s", status, body)
	}
	// Closed, a deny rule on an address: an allowed name is not dialled there.
	h.p.SetHostPolicy(mustPolicy(t, true, []string{"two.example.test"}, []string{"203.0.113.67"}))
	if status, body := forward("two.example.test"); status != 200 || lastDialled() != "203.0.113.66:80" {
		t.Fatalf("closed, two with .67 denied: %d %s, dialled %s", status, body, lastDialled())
	}
}

// In a closed sandbox a ClientHello with ECH gets an access_denied alert, captured or in a
// tunnel; in an open one it goes through.
func TestProxyECH(t *testing.T) {
	h := newHarness(t, nil)
	hello := echHello(t, "hidden.example.test", "api.example.test")
	h.p.SetHostPolicy(mustPolicy(t, true, []string{"api.example.test:443"}, nil))
	const rule = "egress closed: a TLS ClientHello with encrypted_client_hello (ECH) to api.example.test:443 hides the server it is for"

	wantAlert(t, h.dialTransparent(netip.AddrPortFrom(public, 443)), hello)
	if r := h.record("captured", byHost(KindTLS, "api.example.test")); r.Allowed || r.Rule != rule {
		t.Fatalf("captured: record %+v", r)
	}
	wantAlert(t, h.dialExplicitTunnel("api.example.test:443"), hello)
	if r := h.record("tunnel", byHost(KindConnect, "api.example.test")); r.Allowed || r.Rule != rule {
		t.Fatalf("tunnel: record %+v", r)
	}

	// Open: carried to the cover host, which knows nothing of ECH and answers as itself.
	h.p.SetHostPolicy(nil)
	conf := echConfig(t, "hidden.example.test", "api.example.test")
	conf.RootCAs = h.u.caPool
	raw := h.dialTransparent(netip.AddrPortFrom(public, 443))
	err := tls.Client(raw, conf).Handshake()
	raw.Close() // the record comes when the connection ends
	var rejected *tls.ECHRejectionError
	if !errors.As(err, &rejected) {
		t.Fatalf("open: handshake %v, want the cover host's rejection of ECH", err)
	}
	if r := h.record("open", byHost(KindTLS, "api.example.test")); !r.Allowed {
		t.Fatalf("open: record %+v", r)
	}
}
