package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// EgressMode is how a sandbox's egress policy treats a destination no rule names.
type EgressMode string

// The egress modes.
const (
	// EgressOpen lets a sandbox reach anything not denied (the default).
	EgressOpen EgressMode = "open"
	// EgressClosed lets a sandbox reach only what is allowed.
	EgressClosed EgressMode = "closed"
)

var egressModes = [...]EgressMode{EgressOpen, EgressClosed}

// EgressModes returns every egress mode.
func EgressModes() []EgressMode { return slices.Clone(egressModes[:]) }

// Limits of an egress policy.
const (
	// MaxEgressRules is the most entries an allow or deny list holds.
	MaxEgressRules = 256
)

// Egress is a sandbox's egress policy: which destinations its connections may reach through the
// gateway. A rule is HOST[:PORT]: a DNS name ("api.example.com"), a wildcard whose leftmost label
// is "*" ("*.example.com", every name under example.com at any depth but not example.com
// itself), or an IP literal ("203.0.113.7", "[2001:db8::1]:443"); without a port it matches every
// port. Deny wins over allow. The addresses no sandbox may reach (the host's loopback, private,
// link-local and metadata ranges) stay refused whatever the policy says.
type Egress struct {
	// Mode is "open" (default: everything not denied) or "closed" (only what is allowed).
	Mode EgressMode `json:"mode"`
	// Allow lists the destinations a closed sandbox may reach, e.g. ["api.example.com:443",
	// "*.github.com"]; an open sandbox keeps them for when it is closed.
	Allow []string `json:"allow,omitempty"`
	// Deny lists the destinations refused in either mode, e.g. ["*.example.net"].
	Deny []string `json:"deny,omitempty"`
}

// Normalize fills the default mode and validates and normalises every rule: host names in lower
// case with no trailing dot, IP literals in their canonical form, duplicates dropped. field
// names the policy in errors, e.g. "egress"; every invalid value is reported together
// (Problems).
func (e *Egress) Normalize(field string) error {
	var ps Problems
	switch e.Mode {
	case "":
		e.Mode = EgressOpen
	case EgressOpen, EgressClosed:
	default:
		ps.Addf(field+".mode", CodeInvalidArgument, "invalid %s.mode %q: use open or closed", field, e.Mode)
	}
	e.Allow = normalizeRules(&ps, field+".allow", e.Allow)
	e.Deny = normalizeRules(&ps, field+".deny", e.Deny)
	return ps.Err()
}

// normalizeRules returns rules normalised, each once, adding to ps every rule that is not
// HOST[:PORT].
func normalizeRules(ps *Problems, field string, rules []string) []string {
	if len(rules) > MaxEgressRules {
		ps.Addf(field, CodeInvalidArgument, "%s has %d rules: at most %d", field, len(rules), MaxEgressRules)
		return nil
	}
	if len(rules) == 0 {
		return nil
	}
	out := make([]string, 0, len(rules))
	seen := map[string]bool{}
	for i, r := range rules {
		n, err := NormalizeEgressRule(r)
		if err != nil {
			at := fmt.Sprintf("%s[%d]", field, i)
			ps.Addf(at, CodeInvalidArgument, "invalid %s %q: %v", at, r, err)
			continue
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// egressRuleError is why a rule is not HOST[:PORT]; Normalize wraps it with the field.
type egressRuleError string

func (e egressRuleError) Error() string { return string(e) }

// NormalizeEgressRule checks one egress rule, HOST[:PORT], and returns its normal form: host
// names in lower case without a trailing dot, IP literals canonical (IPv6 in brackets when a
// port follows), the port without leading zeros.
func NormalizeEgressRule(rule string) (string, error) {
	if strings.ContainsAny(rule, "/?#@") {
		return "", egressRuleError("a rule is HOST[:PORT], not a URL")
	}
	host, port := rule, ""
	switch {
	case strings.HasPrefix(rule, "["):
		end := strings.IndexByte(rule, ']')
		if end < 0 {
			return "", egressRuleError("an IPv6 address in brackets lacks its ']'")
		}
		host, port = rule[1:end], rule[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return "", egressRuleError("want [IPv6]:PORT")
		}
		port = strings.TrimPrefix(port, ":")
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || a.Zone() != "" {
			return "", egressRuleError("not an IPv6 address in brackets")
		}
		if port == "" && strings.HasSuffix(rule, ":") {
			return "", egressRuleError("an empty port: give one from 1 to 65535 or none")
		}
	case strings.Count(rule, ":") > 1:
		// A bare IPv6 address: a port needs brackets.
	default:
		if i := strings.LastIndexByte(rule, ':'); i >= 0 {
			host, port = rule[:i], rule[i+1:]
			if port == "" {
				return "", egressRuleError("an empty port: give one from 1 to 65535 or none")
			}
		}
	}
	if port != "" {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return "", egressRuleError("the port must be a number from 1 to 65535")
		}
		port = strconv.FormatUint(p, 10)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", egressRuleError("an address with a zone names no destination outside this host")
		}
		a = a.Unmap()
		if port == "" {
			return a.String(), nil
		}
		if a.Is6() {
			return "[" + a.String() + "]:" + port, nil
		}
		return a.String() + ":" + port, nil
	}
	if strings.Count(rule, ":") > 1 && !strings.HasPrefix(rule, "[") {
		return "", egressRuleError("not an IPv6 address (write [ADDR]:PORT for a port)")
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if err := checkHostPattern(host); err != nil {
		return "", err
	}
	if port == "" {
		return host, nil
	}
	return host + ":" + port, nil
}

// IsHostName reports whether h is a DNS host name without a wildcard, in any case, with or
// without a trailing dot, e.g. "localhost" or "api.example.com".
func IsHostName(h string) bool {
	n := strings.TrimSuffix(strings.ToLower(h), ".")
	return !strings.HasPrefix(n, "*.") && checkHostPattern(n) == nil
}

// checkHostPattern checks a lower-case host name, optionally with "*." in front.
func checkHostPattern(host string) error {
	name, _ := strings.CutPrefix(host, "*.")
	switch {
	case host == "":
		return egressRuleError("an empty host")
	case name == "" || strings.Contains(name, "*"):
		return egressRuleError(`a wildcard is "*." before a name, as in *.example.com`)
	case len(name) > 253:
		return egressRuleError("a host name longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return egressRuleError("a host name's labels are 1 to 63 characters")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return egressRuleError("a label of a host name neither starts nor ends with '-'")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return egressRuleError("a host name has letters, digits, '-' and '_' only")
			}
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return egressRuleError("neither a host name (its last label is all digits) nor an IP address")
	}
	return nil
}

// EgressPut is the body of PUT /v1/sandboxes/{name}/egress: the sandbox's whole new policy,
// which replaces the old one. Putting the same policy twice changes nothing.
type EgressPut struct {
	// Egress is the new policy.
	Egress Egress `json:"egress"`
}

// Normalize validates the new policy (see Egress.Normalize).
func (p *EgressPut) Normalize() error { return p.Egress.Normalize("egress") }
