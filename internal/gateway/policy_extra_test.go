package gateway

import (
	"net/netip"
	"strings"
	"testing"
)

// Azure's WireServer is denied; an allowed range covering the host's network does not open
// the host's own addresses.
func TestPolicyWireServerAndHostFirst(t *testing.T) {
	if err := (&AddrPolicy{Local: noLocal}).Check(netip.MustParseAddr("168.63.129.16")); err == nil || !strings.Contains(err.Error(), "Azure WireServer") {
		t.Fatalf("WireServer: %v", err)
	}
	p := &AddrPolicy{
		Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Local: func() []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")} },
	}
	if err := p.Check(netip.MustParseAddr("10.1.2.3")); err == nil {
		t.Fatal("the host's own address allowed by a covering range")
	}
	if err := p.Check(netip.MustParseAddr("10.1.2.4")); err != nil {
		t.Fatalf("another address of the allowed range: %v", err)
	}
}
