package gateway

import (
	"net/netip"
	"testing"
)

func TestNames(t *testing.T) {
	routes := []Route{
		{Host: "api.example.test", Port: 443},
		{Host: "git.example.test", Port: 443},
		{Host: "api.example.test", Port: 80}, // the same host on another port: no new address
		{Host: "Mixed.Example.Test.", Port: 443},
		{Host: "", Port: 443},
	}
	n := NewNames(routes)
	for _, c := range []struct {
		host string
		addr string // "" when the host is not routed
	}{
		{"api.example.test", "198.18.0.1"},
		{"API.example.TEST.", "198.18.0.1"},
		{"git.example.test", "198.18.0.2"},
		{"mixed.example.test", "198.18.0.3"},
		{"sub.api.example.test", ""},
		{"example.test", ""},
		{"", ""},
	} {
		a, ok := n.Addr(c.host)
		if c.addr == "" {
			if ok {
				t.Errorf("Addr(%q) = %v, want none", c.host, a)
			}
			continue
		}
		want := netip.MustParseAddr(c.addr)
		if !ok || a != want {
			t.Errorf("Addr(%q) = %v, %v; want %v", c.host, a, ok, want)
			continue
		}
		h, ok := n.Host(a)
		if !ok || h != normalizeHost(c.host) {
			t.Errorf("Host(%v) = %q, %v; want %q", a, h, ok, normalizeHost(c.host))
		}
		if h, ok := n.Host(netip.AddrFrom16(a.As16())); !ok || h != normalizeHost(c.host) {
			t.Errorf("Host(%v) = %q, %v; want the IPv4 address's host", netip.AddrFrom16(a.As16()), h, ok)
		}
	}
	if h, ok := n.Host(netip.MustParseAddr("198.18.0.4")); ok {
		t.Errorf("Host of an address no route got = %q", h)
	}
	// The same flags after a restart give the same answers.
	again := NewNames(routes)
	for _, host := range []string{"api.example.test", "git.example.test", "mixed.example.test"} {
		a, _ := n.Addr(host)
		b, _ := again.Addr(host)
		if a != b {
			t.Errorf("%s: %v, then %v after a rebuild", host, a, b)
		}
	}
}

func TestNamesSynthetic(t *testing.T) {
	var n *Names // a nil Names has no hosts but still knows the range
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"198.18.0.0", true}, {"198.18.0.1", true}, {"198.19.255.255", true},
		{"::ffff:198.18.3.4", true},
		{"198.17.255.255", false}, {"198.20.0.0", false}, {"127.0.0.1", false},
		{"2001:db8::1", false},
	} {
		if got := n.Synthetic(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("Synthetic(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
	if _, ok := n.Addr("api.example.test"); ok {
		t.Error("a nil Names routes a host")
	}
	if _, ok := n.Host(netip.MustParseAddr("198.18.0.1")); ok {
		t.Error("a nil Names names an address")
	}
}

func TestNamesFull(t *testing.T) {
	routes := make([]Route, MaxNames+1)
	for i := range routes {
		routes[i].Host = "h" + netip.AddrFrom4([4]byte{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}).String() + ".test"
	}
	n := NewNames(routes)
	last, ok := n.Addr(routes[MaxNames-1].Host)
	if !ok || last != netip.MustParseAddr("198.19.251.255") || !n.Synthetic(last) {
		t.Errorf("last host got %v, %v; want 198.19.251.255, the last address below RefusedPrefix", last, ok)
	}
	if a, ok := n.Addr(routes[MaxNames].Host); ok {
		t.Errorf("a host beyond MaxNames got %v", a)
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.": "example.com", "example.com": "example.com", ".": "", "": "",
		"\xffA.b": "\xffa.b", // bytes that are not ASCII stay as they are
	} {
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}
