package api

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of a secret.
const (
	// MaxSecretHosts is the most hosts one secret is bound to.
	MaxSecretHosts = 16
	// MaxSecretValueBytes is the largest value a secret holds.
	MaxSecretValueBytes = 16 << 10
	// MaxSecretFormatLen is the longest header format.
	MaxSecretFormatLen = 256
	// MaxSecretPathPrefixLen is the longest path prefix.
	MaxSecretPathPrefixLen = 1024
	// MaxEnvNameLen is the longest environment variable name a secret is attached as.
	MaxEnvNameLen = 128
	// MaxSandboxSecrets is the most secrets one sandbox has attached.
	MaxSandboxSecrets = 64
)

// SecretValuePlaceholder is what a secret's Format says where the value goes.
const SecretValuePlaceholder = "{value}"

// SecretsPost is the body of POST /v1/secrets: a new secret and where the gateway may send it.
// The value is written once and never returned.
type SecretsPost struct {
	// Name is 1-63 chars of [a-z0-9-] starting with a letter, e.g. "openai".
	Name string `json:"name"`
	// Hosts are the exact host names the value may go to, e.g. ["api.openai.com"] (1 to 16; no
	// wildcards, no ports).
	Hosts []string `json:"hosts"`
	// Header is the one request header the value goes in, e.g. "authorization" or "x-api-key".
	Header string `json:"header"`
	// Format is the header's value, "{value}" standing for the secret, e.g. "Bearer {value}"
	// (default "{value}").
	Format string `json:"format,omitempty"`
	// PathPrefix limits the value to requests whose path starts with it, e.g. "/v1/" (default:
	// every path).
	PathPrefix string `json:"path_prefix,omitempty"`
	// Value is the secret (1 byte to 16 KiB, no control characters); write-only.
	Value string `json:"value"`
}

// Normalize fills the defaults and validates every field, reporting every invalid one
// together (Problems).
func (p *SecretsPost) Normalize() error {
	var ps Problems
	ps.Add("name", ValidateName("secret", p.Name))
	switch {
	case len(p.Hosts) == 0:
		ps.Addf("hosts", CodeInvalidArgument, "a secret needs at least one host it may be sent to")
	case len(p.Hosts) > MaxSecretHosts:
		ps.Addf("hosts", CodeInvalidArgument, "%d hosts: a secret is bound to at most %d", len(p.Hosts), MaxSecretHosts)
	default:
		hosts := make([]string, 0, len(p.Hosts))
		for i, h := range p.Hosts {
			n, err := NormalizeSecretHost(h)
			if err != nil {
				ps.Addf(fmt.Sprintf("hosts[%d]", i), CodeInvalidArgument, "invalid hosts[%d] %q: %v", i, h, err)
				continue
			}
			if !slices.Contains(hosts, n) {
				hosts = append(hosts, n)
			}
		}
		p.Hosts = hosts
	}
	if !validToken(p.Header) {
		ps.Addf("header", CodeInvalidArgument, "invalid header %q: give an HTTP header name such as x-api-key or authorization", p.Header)
	} else {
		p.Header = strings.ToLower(p.Header)
	}
	if p.Format == "" {
		p.Format = SecretValuePlaceholder
	}
	if len(p.Format) > MaxSecretFormatLen || !strings.Contains(p.Format, SecretValuePlaceholder) || hasControl(p.Format) {
		ps.Addf("format", CodeInvalidArgument, "invalid format %q: a header value of at most %d characters with {value} where the secret goes, e.g. 'Bearer {value}'", p.Format, MaxSecretFormatLen)
	}
	if p.PathPrefix != "" && (!strings.HasPrefix(p.PathPrefix, "/") || len(p.PathPrefix) > MaxSecretPathPrefixLen ||
		strings.ContainsAny(p.PathPrefix, "?# ") || hasControl(p.PathPrefix)) {
		ps.Addf("path_prefix", CodeInvalidArgument, "invalid path_prefix %q: a URL path starting with '/', e.g. /v1/", p.PathPrefix)
	}
	ps.Add("value", ValidateSecretValue(p.Value))
	return ps.Err()
}

// ValidateSecretValue checks a secret's value: 1 byte to 16 KiB of UTF-8 without control
// characters (it goes in an HTTP header).
func ValidateSecretValue(v string) error {
	switch {
	case v == "":
		return Errorf(CodeInvalidArgument, "the secret's value is empty")
	case len(v) > MaxSecretValueBytes:
		return Errorf(CodeInvalidArgument, "the secret's value is %d bytes: at most %d", len(v), MaxSecretValueBytes)
	case !utf8.ValidString(v) || hasControl(v):
		// Never echo the value: it is the secret.
		return Errorf(CodeInvalidArgument, "the secret's value has a control character or is not UTF-8: it must fit in an HTTP header")
	}
	return nil
}

// NormalizeSecretHost checks a host a secret is bound to: an exact DNS name (the gateway
// matches hosts exactly), returned in lower case without a trailing dot.
func NormalizeSecretHost(h string) (string, error) {
	n := strings.TrimSuffix(strings.ToLower(h), ".")
	if strings.Contains(n, "*") {
		return "", egressRuleError("a secret's host is an exact name: no wildcards")
	}
	if strings.ContainsAny(n, ":/[]") {
		return "", egressRuleError("a host name without a port or scheme, e.g. api.example.com")
	}
	if err := checkHostPattern(n); err != nil {
		return "", err
	}
	return n, nil
}

// SecretRotate is the body of POST /v1/secrets/{name}/rotate: the secret's new value. Its hosts,
// header and attachments stay; the next request the gateway sends carries the new value.
type SecretRotate struct {
	// Value is the new value (1 byte to 16 KiB, no control characters); write-only.
	Value string `json:"value"`
}

// Validate checks the new value.
func (p *SecretRotate) Validate() error { return ValidateSecretValue(p.Value) }

// Secret is a secret as the API reports it: never its value.
type Secret struct {
	// Name is the secret's name, e.g. "openai".
	Name string `json:"name"`
	// Hosts are the host names the value may go to.
	Hosts []string `json:"hosts"`
	// Header is the request header the value goes in.
	Header string `json:"header"`
	// Format is the header's value, "{value}" standing for the secret.
	Format string `json:"format"`
	// PathPrefix limits the value to paths under it; "" for every path.
	PathPrefix string `json:"path_prefix,omitempty"`
	// Fingerprint tells values apart without revealing them: "hmac-sha256:" and 16 hex digits of
	// an HMAC keyed by the daemon's master key, e.g. "hmac-sha256:3f9a0c1d2e4b5a69". It changes
	// when the secret is rotated to a new value.
	Fingerprint string `json:"fingerprint"`
	// CreatedAt and UpdatedAt are when it was created and last rotated.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// UsedBy are the sandboxes it is attached to, sorted: always its owner's, by name.
	UsedBy []string `json:"used_by"`
	// Owner is the user whose secret it is: names are per user, so two users' secrets may
	// share a name.
	Owner string `json:"owner"`
}

// SecretList is the body of GET /v1/secrets: the caller's secrets, or with all_users=true (an
// admin only) every user's.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}

// SecretAttachment attaches a secret to a sandbox: the sandbox's processes see a placeholder
// (unique per secret and sandbox) in the environment variable Env, which the gateway replaces
// with the value only where the secret is bound.
type SecretAttachment struct {
	// Secret is the secret's name.
	Secret string `json:"secret"`
	// Env is the variable's name (default: the secret's name in upper case with '-' as '_',
	// e.g. OPENAI_KEY for openai-key).
	Env string `json:"env,omitempty"`
}

// DefaultSecretEnv is the variable a secret is attached as when none is given.
func DefaultSecretEnv(secret string) string {
	return strings.ToUpper(strings.ReplaceAll(secret, "-", "_"))
}

// Normalize validates the attachment and fills the default variable. field names it in errors.
func (a *SecretAttachment) Normalize(field string) error {
	var ps Problems
	a.normalize(&ps, field, "")
	return ps.Err()
}

// normalize is Normalize adding its problems to ps, under at: the attachment's place in a
// list, e.g. "secrets[0]", or "" for a body of its own.
func (a *SecretAttachment) normalize(ps *Problems, field, at string) {
	in := func(name string) string {
		if at == "" {
			return name
		}
		return at + "." + name
	}
	nameErr := ValidateName("secret", a.Secret)
	ps.Add(in("secret"), nameErr)
	if a.Env == "" {
		if nameErr != nil {
			return // the default variable would only repeat the name's problem
		}
		a.Env = DefaultSecretEnv(a.Secret)
	}
	if !validEnvName(a.Env) {
		ps.Addf(in("env"), CodeInvalidArgument, "invalid %s.env %q: a variable name of letters, digits and '_', not starting with a digit", field, a.Env)
	}
}

// NormalizeSecretAttachments validates a sandbox's attachments: at most MaxSandboxSecrets, each
// secret and each variable once. Every invalid one is reported together (Problems).
func NormalizeSecretAttachments(field string, list []SecretAttachment) error {
	var ps Problems
	if len(list) > MaxSandboxSecrets {
		ps.Addf(field, CodeInvalidArgument, "%s has %d secrets: at most %d", field, len(list), MaxSandboxSecrets)
		return ps.Err()
	}
	secrets, envs := map[string]bool{}, map[string]bool{}
	for i := range list {
		a := &list[i]
		at := fmt.Sprintf("%s[%d]", field, i)
		before := ps.Len()
		a.normalize(&ps, field, at)
		if ps.Len() > before {
			continue
		}
		if secrets[a.Secret] {
			ps.Addf(at+".secret", CodeInvalidArgument, "%s names secret %q twice", field, a.Secret)
		}
		if envs[a.Env] {
			ps.Addf(at+".env", CodeInvalidArgument, "%s gives two secrets the variable %s", field, a.Env)
		}
		secrets[a.Secret], envs[a.Env] = true, true
	}
	return ps.Err()
}

// SandboxSecretsPost is the body of POST /v1/sandboxes/{name}/secrets: attach a secret. Its
// variable is in every process the sandbox starts from then on. Attaching a secret attached
// already changes its variable and keeps its placeholder.
type SandboxSecretsPost = SecretAttachment

func validEnvName(s string) bool {
	if s == "" || len(s) > MaxEnvNameLen || ('0' <= s[0] && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validToken reports whether s is an HTTP token (RFC 9110 5.6.2), as header names are.
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return false
}
