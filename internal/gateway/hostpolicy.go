package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// HostPolicy is one sandbox's egress policy: which destinations it may reach, by the name it
// asked for (TLS SNI, HTTP Host, CONNECT target, a URL's host) or, when it asked for none, by
// the address it dialled. It is decided before AddrPolicy, which still refuses the addresses no
// sandbox may reach whatever a HostPolicy allows. A nil or zero HostPolicy lets everything
// through. A HostPolicy is not changed once a Proxy holds it: a live change hands over a new one.
type HostPolicy struct {
	// Closed lets through only what an Allow rule matches; open lets through what no Deny rule
	// matches.
	Closed bool
	// Allow lists what a closed sandbox may reach.
	Allow []HostRule
	// Deny lists what the sandbox may not reach in either mode; it wins over Allow.
	Deny []HostRule
	// TODO(issue 10, model route): a closed sandbox reaches the model route too, whatever Allow
	// says; it is let through here once the route exists.
}

// HostRule matches destinations by host and, unless Port is 0, by port.
type HostRule struct {
	// Host is a lower-case name ("api.example.com"), a wildcard ("*.example.com": every name
	// under example.com at any depth, not example.com itself), or an IP address in its
	// canonical form. An address in an allow rule matches only a destination asked for by that
	// address: in a closed sandbox the name is what is allowed, so allowing an address never
	// lets through a name that resolves to it. An address in a deny rule also refuses a name
	// that resolves to it (CheckAddr), and an IPv6 address that carries it to a translator.
	Host string
	Port uint16 // 0: every port
}

// ParseHostRule parses HOST[:PORT] in the normal form pkg/api's NormalizeEgressRule gives
// ("api.example.com:443", "*.example.com", "203.0.113.7", "[2001:db8::1]:443").
func ParseHostRule(s string) (HostRule, error) {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	r := HostRule{Host: policyHost(host)}
	if port != "" {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return HostRule{}, fmt.Errorf("egress rule %q: the port must be from 1 to 65535", s)
		}
		r.Port = uint16(p)
	}
	if r.Host == "" || r.Host == "*." || strings.Contains(strings.TrimPrefix(r.Host, "*."), "*") {
		return HostRule{}, fmt.Errorf("egress rule %q: want HOST[:PORT]", s)
	}
	return r, nil
}

// String is the rule as HOST[:PORT].
func (r HostRule) String() string {
	if r.Port == 0 {
		return r.Host
	}
	return net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port)))
}

// matchesHost reports whether the rule's host matches host, which is normalised: a lower-case
// name or an address's canonical form.
func (r HostRule) matchesHost(host string) bool {
	if suffix, ok := strings.CutPrefix(r.Host, "*"); ok {
		_, err := netip.ParseAddr(host)
		return err != nil && len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return r.Host == host
}

func (r HostRule) matches(host string, port uint16) bool {
	return (r.Port == 0 || r.Port == port) && r.matchesHost(host)
}

// HostDenied is the error of a destination a sandbox's HostPolicy refuses.
type HostDenied struct {
	Host string // the name asked for, or the address when none was
	Port uint16 // 0 for a DNS question
	// Rule names what refused it, for the audit: "egress deny *.example.com" or
	// "egress closed: api.other.test:443 is not allowed".
	Rule string
	// Addr is the address Host resolved to that an address deny rule names; the sandbox is
	// not told it (see Denied). Zero when the rule matched what the sandbox asked for.
	Addr netip.Addr
}

// Error is what the sandbox is told.
func (d *HostDenied) Error() string {
	switch {
	case d.Addr.IsValid():
		return d.target() + " is refused: it resolves to an address an egress deny rule names"
	case strings.HasPrefix(d.Rule, "egress closed"):
		return d.Rule
	}
	return d.target() + " is refused: " + d.Rule
}

func (d *HostDenied) target() string {
	if d.Port == 0 {
		return d.Host
	}
	return net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port)))
}

// Check returns nil if the policy lets the sandbox reach host (a name, or an address asked for
// directly) on port, else a *HostDenied.
func (p *HostPolicy) Check(host string, port uint16) error {
	if p == nil {
		return nil
	}
	host = policyHost(host)
	for _, r := range p.Deny {
		if r.matches(host, port) {
			return &HostDenied{Host: host, Port: port, Rule: "egress deny " + r.String()}
		}
	}
	if !p.Closed {
		return nil
	}
	for _, r := range p.Allow {
		if r.matches(host, port) {
			return nil
		}
	}
	d := &HostDenied{Host: host, Port: port}
	d.Rule = "egress closed: " + d.target() + " is not allowed"
	return d
}

// CheckName returns nil if the policy lets the sandbox reach host on some port, else a
// *HostDenied: the resolver answers such a name with an address of RefusedPrefix, so a client
// learns nothing of the name's addresses and hears the refusal from the proxy.
func (p *HostPolicy) CheckName(host string) error {
	if p == nil {
		return nil
	}
	host = policyHost(host)
	for _, r := range p.Deny {
		if r.Port == 0 && r.matchesHost(host) {
			return &HostDenied{Host: host, Rule: "egress deny " + r.String()}
		}
	}
	if !p.Closed {
		return nil
	}
	for _, r := range p.Allow {
		if r.matchesHost(host) {
			return nil
		}
	}
	return &HostDenied{Host: host, Rule: "egress closed: " + host + " is not allowed"}
}

// CheckAddr returns nil unless a deny rule that is an address names a, or an IPv4 address a
// carries to a translator (NAT64, 6to4), on port; then a *HostDenied. host is the name that
// resolved to a, "" when a was asked for directly. Port 0 is a DNS answer, refused only by a
// rule for every port. Allow rules are not consulted: a name was decided by Check, and an
// address asked for directly too.
func (p *HostPolicy) CheckAddr(host string, a netip.Addr, port uint16) error {
	if p == nil || len(p.Deny) == 0 {
		return nil
	}
	a = a.WithZone("").Unmap()
	for _, b := range append([]netip.Addr{a}, embedded(a)...) {
		s := b.String()
		for _, r := range p.Deny {
			if r.Host == s && (r.Port == 0 || port != 0 && r.Port == port) {
				d := &HostDenied{Host: host, Port: port, Rule: "egress deny " + r.String()}
				if host == "" {
					d.Host = a.String()
				} else {
					d.Addr = a
				}
				return d
			}
		}
	}
	return nil
}

// CheckECH returns a *HostDenied if the sandbox's policy is closed: a TLS ClientHello that
// carries encrypted_client_hello (ECH) names a cover host in its SNI, host, while the server it
// is for is encrypted, so only an open sandbox lets it through. Port 0 is not used.
func (p *HostPolicy) CheckECH(host string, port uint16) error {
	if p == nil || !p.Closed {
		return nil
	}
	d := &HostDenied{Host: host, Port: port}
	d.Rule = "egress closed: a TLS ClientHello with encrypted_client_hello (ECH) to " + d.target() + " hides the server it is for"
	return d
}

// policyHost is host as rules are matched against it: lower case without a trailing dot, an
// address in its canonical form.
func policyHost(host string) string {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return a.WithZone("").Unmap().String()
	}
	return normalizeHost(host)
}
