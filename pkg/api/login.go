package api

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// LoginProvider names whose account a provider login is for: the harnesses that use it.
type LoginProvider string

// The providers a login can be added for.
const (
	// LoginClaude is an Anthropic login, used by the claude-code harness (and by OpenCode's
	// Anthropic models).
	LoginClaude LoginProvider = "claude"
	// LoginCodex is an OpenAI login, used by the codex harness (and OpenCode's OpenAI models).
	LoginCodex LoginProvider = "codex"
)

// LoginKind says what a login holds.
type LoginKind string

// The kinds of login.
const (
	// LoginAPIKey is a provider API key (claude: sent as x-api-key; codex: as a bearer token).
	LoginAPIKey LoginKind = "api-key"
	// LoginOAuthToken is the long-lived token `claude setup-token` prints (Claude Pro/Max), sent
	// to the Anthropic API as a bearer token.
	LoginOAuthToken LoginKind = "oauth-token"
	// LoginChatGPT is the auth.json `codex login` writes: a ChatGPT access token that expires
	// and a refresh token that changes on every refresh. Only sandboxd refreshes it.
	LoginChatGPT LoginKind = "chatgpt"
)

// LoginStatus says whether a login can be used.
type LoginStatus string

// The statuses of a login.
const (
	LoginOK LoginStatus = "ok"
	// LoginNeedsReconnect: the provider refused the login's refresh token; `hiloop login add`
	// with a fresh login fixes it, and prompts that need it fail saying so.
	LoginNeedsReconnect LoginStatus = "needs_reconnect"
)

// LoginKinds returns the kinds a provider's login may be, in the order the docs list them.
func LoginKinds(p LoginProvider) []LoginKind {
	switch p {
	case LoginClaude:
		return []LoginKind{LoginAPIKey, LoginOAuthToken}
	case LoginCodex:
		return []LoginKind{LoginAPIKey, LoginChatGPT}
	}
	return nil
}

// MaxLoginValueBytes bounds a login's value: an auth.json is a few KiB.
const MaxLoginValueBytes = 64 << 10

// LoginPut is the body of PUT /v1/logins/{provider}: the provider's login, replacing any
// before it. The value is written once and never returned.
type LoginPut struct {
	// Kind is api-key or oauth-token for claude, api-key or chatgpt for codex.
	Kind LoginKind `json:"kind"`
	// Value is the key, the token, or for chatgpt the contents of Codex's auth.json; write-only.
	Value string `json:"value"`
}

// Validate checks the body for provider. It never echoes the value.
func (p *LoginPut) Validate(provider LoginProvider) error {
	kinds := LoginKinds(provider)
	if kinds == nil {
		return Errorf(CodeInvalidArgument, "unknown login provider %q: give claude or codex", provider)
	}
	if !slices.Contains(kinds, p.Kind) {
		names := make([]string, len(kinds))
		for i, k := range kinds {
			names[i] = string(k)
		}
		return Errorf(CodeInvalidArgument, "a %s login is one of %s, not %q", provider, strings.Join(names, ", "), p.Kind)
	}
	switch {
	case p.Value == "":
		return Errorf(CodeInvalidArgument, "the login's value is empty")
	case len(p.Value) > MaxLoginValueBytes:
		return Errorf(CodeInvalidArgument, "the login's value is %d bytes: at most %d", len(p.Value), MaxLoginValueBytes)
	case !utf8.ValidString(p.Value):
		return Errorf(CodeInvalidArgument, "the login's value is not UTF-8")
	}
	if p.Kind == LoginChatGPT {
		// The file is parsed by the daemon; here only its shape, so a wrong file fails early.
		var f struct {
			Tokens *struct {
				AccessToken  string `json:"access_token"`
				RefreshToken string `json:"refresh_token"`
			} `json:"tokens"`
		}
		if err := json.Unmarshal([]byte(p.Value), &f); err != nil || f.Tokens == nil ||
			f.Tokens.AccessToken == "" || f.Tokens.RefreshToken == "" {
			return Errorf(CodeInvalidArgument, "a chatgpt login is the auth.json `codex login` writes, with tokens.access_token and tokens.refresh_token")
		}
		return nil
	}
	if hasControl(p.Value) || strings.ContainsAny(p.Value, " \t") {
		return Errorf(CodeInvalidArgument, "the %s has a space or a control character: it must fit in an HTTP header", p.Kind)
	}
	return nil
}

// Login is a provider login as the API shows it: never its value.
type Login struct {
	Provider LoginProvider `json:"provider"`
	Kind     LoginKind     `json:"kind"`
	// Fingerprint tells values apart without revealing them ("hmac-sha256:…"); for chatgpt,
	// of the refresh token the login was added with.
	Fingerprint string      `json:"fingerprint"`
	Status      LoginStatus `json:"status"`
	// StatusMessage says why a login needs reconnecting.
	StatusMessage string `json:"status_message,omitempty"`
	// ExpiresAt is when a chatgpt login's current access token expires; sandboxd renews it an
	// hour before.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// RefreshedAt is when sandboxd last renewed a chatgpt login.
	RefreshedAt *time.Time `json:"refreshed_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	// Owner is the user whose login it is: each user has their own logins, and a sandbox's
	// harnesses use its owner's.
	Owner string `json:"owner"`
}

// LoginList is the answer of GET /v1/logins: the caller's logins, or with all_users=true (an
// admin only) every user's.
type LoginList struct {
	Logins []Login `json:"logins"`
}

// AuditRecord is one entry of the daemon's audit log (GET /v1/audit): every API call that
// changes something, with its user; a provider login added, removed, refreshed or refused; each
// harness start that uses a login; a client certificate issued.
type AuditRecord struct {
	// Seq numbers the records from 1; the daemon keeps a bounded number and drops the oldest.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Action is what happened: api_call, certificate_issued, login_added, login_removed,
	// login_refreshed, login_refresh_failed, harness_login_used, harness_refresh_answered,
	// image_build_egress.
	Action string `json:"action"`
	// User is who did it: the caller of an API call, the user a certificate was issued to.
	User string `json:"user,omitempty"`
	// As is the user in whose namespace an admin acted (Hiloop-As).
	As string `json:"as,omitempty"`
	// Method and Route are an API call's HTTP method and route pattern, e.g. DELETE and
	// /v1/sandboxes/{name}; Resources the names its path gave, by the pattern's names; Status
	// the HTTP status it was answered with. A call's body is never recorded.
	Method    string            `json:"method,omitempty"`
	Route     string            `json:"route,omitempty"`
	Resources map[string]string `json:"resources,omitempty"`
	Status    int               `json:"status,omitempty"`
	// Provider is the login's provider.
	Provider LoginProvider `json:"provider,omitempty"`
	// Owner is the user whose login it is. A harness start uses the login of its sandbox's
	// owner, whoever started it, and its record names that owner.
	Owner string `json:"owner,omitempty"`
	// Kind is the login's kind.
	Kind LoginKind `json:"kind,omitempty"`
	// Sandbox and Harness name the harness start that used a login.
	Sandbox string `json:"sandbox,omitempty"`
	Harness string `json:"harness,omitempty"`
	Session string `json:"session,omitempty"`
	// Message says more, e.g. why a refresh failed.
	Message string `json:"message,omitempty"`
}

// The actions of the audit log.
const (
	// AuditAPICall: a call that changes something (any method but GET), whatever its outcome.
	AuditAPICall = "api_call"
	// AuditCertificateIssued: a trust token traded for a client certificate; Message is its
	// fingerprint.
	AuditCertificateIssued  = "certificate_issued"
	AuditLoginAdded         = "login_added"
	AuditLoginRemoved       = "login_removed"
	AuditLoginRefreshed     = "login_refreshed"
	AuditLoginRefreshFailed = "login_refresh_failed"
	AuditHarnessLoginUsed   = "harness_login_used"
	// AuditHarnessRefreshAnswered: a harness asked to refresh its placeholder ChatGPT login,
	// and the model route answered it itself (Message says whether it refused).
	AuditHarnessRefreshAnswered = "harness_refresh_answered"
	// AuditImageBuildEgress: the gateway's decision about a connection (or a refused DNS
	// query) of an image build's steps; Sandbox is the build sandbox (build-NAME), Message the
	// destination, the verdict and the bytes or the rule.
	AuditImageBuildEgress = "image_build_egress"
)

// AuditRecordList is the answer of GET /v1/audit.
type AuditRecordList struct {
	Records []AuditRecord `json:"records"`
}
