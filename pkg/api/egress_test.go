package api

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestNormalizeEgressRule(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" when refused
		err      string // a part of the refusal
	}{
		{"api.example.com", "api.example.com", ""},
		{"API.Example.COM.", "api.example.com", ""},
		{"api.example.com:443", "api.example.com:443", ""},
		{"api.example.com:0443", "api.example.com:443", ""},
		{"*.example.com", "*.example.com", ""},
		{"*.example.com:8080", "*.example.com:8080", ""},
		{"intranet", "intranet", ""},
		{"_acme.example.com", "_acme.example.com", ""},
		{"x--y.example", "x--y.example", ""},
		{"203.0.113.7", "203.0.113.7", ""},
		{"203.0.113.7:443", "203.0.113.7:443", ""},
		{"2001:DB8::1", "2001:db8::1", ""},
		{"[2001:db8::1]", "2001:db8::1", ""},
		{"[2001:db8::1]:443", "[2001:db8::1]:443", ""},
		{"::ffff:203.0.113.7", "203.0.113.7", ""},
		{"[::ffff:203.0.113.7]:80", "203.0.113.7:80", ""},

		{"", "", "empty host"},
		{":443", "", "empty host"},
		{"api.example.com:", "", "empty port"},
		{"api.example.com:0", "", "1 to 65535"},
		{"api.example.com:65536", "", "1 to 65535"},
		{"api.example.com:https", "", "1 to 65535"},
		{"api.example.com:-1", "", "1 to 65535"},
		{"*", "", "wildcard"},
		{"*.", "", "wildcard"},
		{"a.*.example.com", "", "wildcard"},
		{"*example.com", "", "wildcard"},
		{"*.*.example.com", "", "wildcard"},
		{"**.example.com", "", "wildcard"},
		{"api..example.com", "", "1 to 63"},
		{".example.com", "", "1 to 63"},
		{strings.Repeat("a", 64) + ".com", "", "1 to 63"},
		{strings.Repeat("a.", 127) + "com", "", "longer than 253"},
		{"-api.example.com", "", "'-'"},
		{"api-.example.com", "", "'-'"},
		{"api example.com", "", "letters, digits"},
		{"ex\u00e4mple.com", "", "letters, digits"},
		{"http://example.com", "", "not a URL"},
		{"example.com/path", "", "not a URL"},
		{"1.2.3.4.5", "", "all digits"},
		{"999.1.1.1", "", "all digits"},
		{"*.1.2.3", "", "all digits"},
		{"[2001:db8::1", "", "']'"},
		{"[2001:db8::1]x", "", "[IPv6]:PORT"},
		{"[2001:db8::1]:", "", "empty port"},
		{"[203.0.113.7]:80", "", "IPv6"},
		{"[fe80::1%eth0]:80", "", "IPv6"},
		{"fe80::1%eth0", "", "zone"},
		{"2001:db8::1:443x", "", "IPv6"},
	} {
		got, err := NormalizeEgressRule(tc.in)
		switch {
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("NormalizeEgressRule(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.want == "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("NormalizeEgressRule(%q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
		}
		if tc.want != "" {
			// The normal form is a fixed point.
			if again, err := NormalizeEgressRule(got); err != nil || again != got {
				t.Errorf("NormalizeEgressRule(%q) = %q, %v; want it unchanged", got, again, err)
			}
		}
	}
}

func TestEgressNormalize(t *testing.T) {
	many := make([]string, MaxEgressRules+1)
	for i := range many {
		many[i] = "example.com"
	}
	for _, tc := range []struct {
		name string
		in   Egress
		want Egress
		err  string // the whole message of the invalid_argument refusal
	}{
		{"empty is open", Egress{}, Egress{Mode: EgressOpen}, ""},
		{"closed", Egress{Mode: EgressClosed, Allow: []string{"API.example.com", "api.example.com", "*.GitHub.com:443"}},
			Egress{Mode: EgressClosed, Allow: []string{"api.example.com", "*.github.com:443"}}, ""},
		{"deny", Egress{Deny: []string{"*.example.net"}}, Egress{Mode: EgressOpen, Deny: []string{"*.example.net"}}, ""},
		{"the cap", Egress{Allow: many[:MaxEgressRules]}, Egress{Mode: EgressOpen, Allow: []string{"example.com"}}, ""},
		{"bad mode", Egress{Mode: "shut"}, Egress{}, `invalid egress.mode "shut": use open or closed`},
		{"case of the mode", Egress{Mode: "Closed"}, Egress{}, `invalid egress.mode "Closed": use open or closed`},
		{"bad allow", Egress{Allow: []string{"ok.example.com", "bad host"}}, Egress{},
			`invalid egress.allow[1] "bad host": a host name has letters, digits, '-' and '_' only`},
		{"bad deny", Egress{Deny: []string{"x.example.com:99999"}}, Egress{},
			`invalid egress.deny[0] "x.example.com:99999": the port must be a number from 1 to 65535`},
		{"too many", Egress{Deny: many}, Egress{}, "egress.deny has 257 rules: at most 256"},
	} {
		err := tc.in.Normalize("egress")
		if tc.err == "" {
			if err != nil || tc.in.Mode != tc.want.Mode || !slices.Equal(tc.in.Allow, tc.want.Allow) || !slices.Equal(tc.in.Deny, tc.want.Deny) {
				t.Errorf("%s: got %+v, %v; want %+v", tc.name, tc.in, err, tc.want)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Message != tc.err {
			t.Errorf("%s: got %v; want invalid_argument %q", tc.name, err, tc.err)
		}
	}
}

// A create request and a live change validate a policy alike.
func TestEgressValidatedAtCreate(t *testing.T) {
	p := SandboxesPost{Name: "web", Egress: &Egress{Mode: EgressClosed, Allow: []string{"*"}}}
	put := EgressPut{Egress: *p.Egress}
	cerr, perr := p.Normalize(), put.Normalize()
	if cerr == nil || perr == nil || cerr.Error() != perr.Error() {
		t.Errorf("create: %v; put: %v; want the same refusal", cerr, perr)
	}
	p = SandboxesPost{Name: "web"}
	if err := p.Normalize(); err != nil || p.Egress != nil {
		t.Errorf("create without a policy: %v, %+v; want none (open)", err, p.Egress)
	}
}

func TestIsHostName(t *testing.T) {
	for h, want := range map[string]bool{
		"localhost": true, "api.example.com": true, "API.Example.com.": true, "host_1.lan": true,
		"": false, "*.example.com": false, "a..b": false, "-a.b": false, "a b": false, "127.0.0.1": false,
		"a:80": false, "[::1]": false, "é.test": false,
	} {
		if got := IsHostName(h); got != want {
			t.Errorf("IsHostName(%q) = %v, want %v", h, got, want)
		}
	}
}
