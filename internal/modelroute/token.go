package modelroute

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// KeySize is the length of the daemon's token key.
const KeySize = 32

// A token is a provider-shaped prefix, then base64url (no padding) of payload ‖ MAC, then (for
// Anthropic) the "AA" its keys end with:
//
//	payload: version (1) ‖ provider (1) ‖ issued, unix seconds (8) ‖ start id (12) ‖ sandbox id
//	MAC:     HMAC-SHA256(key, tokenContext ‖ payload)
//
// The prefixes carry "hiloop" so a token is recognisable in a log or a config file, and the
// shapes pass the key checks harnesses make (sk-ant-api03-…AA, sk-proj-…).
const (
	tokenVersion = 1
	tokenContext = "hiloop model route token\x00"
	startIDSize  = 12
	macSize      = sha256.Size
	headerSize   = 1 + 1 + 8 + startIDSize
	// MaxSandboxID bounds the sandbox id a token carries.
	MaxSandboxID = 64
)

// The ChatGPT route's token is a JWT in shape (see chatGPTToken): Codex in ChatGPT mode reads
// its access token's claims, and refreshes one that expires.
var tokenShape = map[Provider]struct{ prefix, suffix string }{
	Anthropic: {"sk-ant-api03-hiloop-", "AA"},
	OpenAI:    {"sk-proj-hiloop-", ""},
	ChatGPT:   {chatGPTTokenHead + ".", ""}, // then the claims, a dot, and the signed part
}

// providerCode is a provider's byte in a token's payload.
var providerCode = map[Provider]byte{Anthropic: 1, OpenAI: 2, ChatGPT: 3}

// Start is one harness start: the tokens minted for it are valid, on its sandbox's route, until
// it is revoked. It carries no secret: a token can be made from it only with the key.
type Start struct {
	ID        string    `json:"id"` // 24 hex digits, random
	SandboxID string    `json:"sandbox_id"`
	Issued    time.Time `json:"issued"` // to the second, as the token carries it
}

// Tokens mints the audience-scoped tokens each harness start gets in place of provider API keys,
// checks the tokens requests present, and holds the set of live starts. A token names its
// sandbox, its provider and its start, signed with the daemon's key: on another sandbox's
// listener or another provider's route it is refused as wrong_audience (403), and once its
// start is revoked, or unknown, as invalid (401).
//
// The set is in memory. After a daemon restart it is empty, so every token minted before is
// refused (401) until the daemon calls Restore: harness processes get their stdio from the
// daemon and end with it, and a harness started after the restart gets a new token, so by
// default no live harness holds an old one. A daemon that keeps harnesses across a restart
// persists Starts (they hold no secret) and restores them at boot with the same key; with a new
// key the old tokens fail their signature whatever is restored.
type Tokens struct {
	key []byte

	mu     sync.Mutex
	starts map[string]Start // by id
}

// NewTokens returns a Tokens signing with key, which must be KeySize random bytes the caller
// keeps (for Restore to be of use across restarts, the same ones).
func NewTokens(key []byte) (*Tokens, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("model route token key: %d bytes, want %d", len(key), KeySize)
	}
	return &Tokens{key: slices.Clone(key), starts: map[string]Start{}}, nil
}

// Mint registers a new harness start in the sandbox; Token then makes its token for each
// provider.
func (t *Tokens) Mint(sandboxID string) (Start, error) {
	if sandboxID == "" || len(sandboxID) > MaxSandboxID {
		return Start{}, fmt.Errorf("mint a model route token: sandbox id %q is empty or longer than %d bytes", sandboxID, MaxSandboxID)
	}
	var id [startIDSize]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Start{}, err
	}
	s := Start{ID: hex.EncodeToString(id[:]), SandboxID: sandboxID, Issued: time.Now().Truncate(time.Second).UTC()}
	t.mu.Lock()
	t.starts[s.ID] = s
	t.mu.Unlock()
	return s, nil
}

// Token returns the start's token for provider p: the value a harness gets as that provider's
// API key. The same start and provider always give the same token.
func (t *Tokens) Token(s Start, p Provider) (string, error) {
	shape, ok := tokenShape[p]
	id, err := hex.DecodeString(s.ID)
	switch {
	case !ok:
		return "", fmt.Errorf("model route token: unknown provider %q", p)
	case err != nil || len(id) != startIDSize:
		return "", fmt.Errorf("model route token: start id %q is not %d hex bytes", s.ID, startIDSize)
	case s.SandboxID == "" || len(s.SandboxID) > MaxSandboxID:
		return "", fmt.Errorf("model route token: sandbox id %q is empty or longer than %d bytes", s.SandboxID, MaxSandboxID)
	}
	payload := make([]byte, headerSize, headerSize+len(s.SandboxID)+macSize)
	payload[0] = tokenVersion
	payload[1] = providerCode[p]
	binary.BigEndian.PutUint64(payload[2:], uint64(s.Issued.Unix()))
	copy(payload[10:], id)
	payload = append(payload, s.SandboxID...)
	payload = append(payload, t.mac(payload)...)
	body := base64.RawURLEncoding.EncodeToString(payload)
	if p == ChatGPT {
		return chatGPTToken(s, body), nil
	}
	return shape.prefix + body + shape.suffix, nil
}

func (t *Tokens) mac(payload []byte) []byte {
	h := hmac.New(sha256.New, t.key)
	h.Write([]byte(tokenContext))
	h.Write(payload)
	return h.Sum(nil)
}

// Revoke ends a start: its tokens are refused from the next request on. Requests already
// forwarded complete.
func (t *Tokens) Revoke(startID string) {
	t.mu.Lock()
	delete(t.starts, startID)
	t.mu.Unlock()
}

// RevokeSandbox ends every start of a sandbox (it stopped or was deleted).
func (t *Tokens) RevokeSandbox(sandboxID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, s := range t.starts {
		if s.SandboxID == sandboxID {
			delete(t.starts, id)
		}
	}
}

// Starts returns the live starts, for a daemon that persists them.
func (t *Tokens) Starts() []Start {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Start, 0, len(t.starts))
	for _, s := range t.starts {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Start) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Restore makes starts live again (see Tokens on restarts).
func (t *Tokens) Restore(starts []Start) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range starts {
		s.Issued = s.Issued.Truncate(time.Second).UTC()
		t.starts[s.ID] = s
	}
}

// Verify checks a token presented on sandboxID's route for provider p, and returns its start.
// A token that is not one of ours or fails its signature, or whose start is not live, is a 401
// with CodeInvalidToken; a genuine token for another sandbox or provider is a 403 with
// CodeWrongAudience. The audience is checked before liveness, so a replayed token is named for
// what it is even after its harness stopped.
func (t *Tokens) Verify(token, sandboxID string, p Provider) (Start, *Error) {
	invalid := func(why string) (Start, *Error) {
		return Start{}, &Error{Status: http.StatusUnauthorized, Code: CodeInvalidToken,
			Message: "the API key is not a valid hiloop model route token: " + why}
	}
	var tp Provider
	var body string
	for prov, shape := range tokenShape {
		if b, ok := strings.CutPrefix(token, shape.prefix); ok {
			if b, ok = strings.CutSuffix(b, shape.suffix); ok {
				tp, body = prov, b
			}
		}
	}
	if tp == ChatGPT {
		// header.claims.signed: the signed part is what the other shapes carry.
		_, body, _ = strings.Cut(body, ".")
	}
	if tp == "" {
		return invalid("it has none of the token shapes (a real provider key never reaches a sandbox)")
	}
	s, e := t.verifyBody(body, tp, sandboxID, p)
	if e == nil && tp == ChatGPT {
		// Only the signed part counts, but a token's claims are its start's: an altered JWT is
		// not this start's token.
		if want, _ := t.Token(s, ChatGPT); want != token {
			return invalid("its claims are not the ones it was minted with")
		}
	}
	return s, e
}

// verifyBody checks the signed part of a token of provider tp presented on sandboxID's route
// for provider p (see Verify).
func (t *Tokens) verifyBody(body string, tp Provider, sandboxID string, p Provider) (Start, *Error) {
	invalid := func(why string) (Start, *Error) {
		return Start{}, &Error{Status: http.StatusUnauthorized, Code: CodeInvalidToken,
			Message: "the API key is not a valid hiloop model route token: " + why}
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(raw) < headerSize+1+macSize || len(raw) > headerSize+MaxSandboxID+macSize {
		return invalid("it is malformed")
	}
	payload, sig := raw[:len(raw)-macSize], raw[len(raw)-macSize:]
	if !hmac.Equal(sig, t.mac(payload)) {
		return invalid("its signature does not match (minted by another daemon, or altered)")
	}
	if payload[0] != tokenVersion || payload[1] != providerCode[tp] {
		return invalid("its version or provider is not one this daemon mints")
	}
	s := Start{
		ID:        hex.EncodeToString(payload[10:headerSize]),
		SandboxID: string(payload[headerSize:]),
		Issued:    time.Unix(int64(binary.BigEndian.Uint64(payload[2:])), 0).UTC(),
	}
	switch {
	case s.SandboxID != sandboxID:
		return Start{}, &Error{Status: http.StatusForbidden, Code: CodeWrongAudience,
			Message: "wrong_audience: this token was minted for another sandbox's model route; it is not valid here"}
	case tp != p:
		return Start{}, &Error{Status: http.StatusForbidden, Code: CodeWrongAudience,
			Message: fmt.Sprintf("wrong_audience: this token is for the %s route, not the %s route", tp, p)}
	}
	t.mu.Lock()
	live, ok := t.starts[s.ID]
	t.mu.Unlock()
	if !ok || live.SandboxID != s.SandboxID || !live.Issued.Equal(s.Issued) {
		return invalid("the harness start it was minted for has ended (a harness started since has a new token)")
	}
	return s, nil
}
