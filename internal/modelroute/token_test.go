package modelroute

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func newTokens(t testing.TB) *Tokens {
	t.Helper()
	tk, err := NewTokens(testKey(7))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func mint(t testing.TB, tk *Tokens, sandbox string, p Provider) (Start, string) {
	t.Helper()
	s, err := tk.Mint(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tk.Token(s, p)
	if err != nil {
		t.Fatal(err)
	}
	return s, tok
}

// Tokens look like the providers' keys, so that harnesses' key checks pass.
func TestTokenShape(t *testing.T) {
	tk := newTokens(t)
	_, a := mint(t, tk, "0123456789ab", Anthropic)
	_, o := mint(t, tk, "0123456789ab", OpenAI)
	if !regexp.MustCompile(`^sk-ant-api03-[A-Za-z0-9_-]{80,}AA$`).MatchString(a) {
		t.Errorf("anthropic token %q is not shaped like an Anthropic key", a)
	}
	if !regexp.MustCompile(`^sk-proj-[A-Za-z0-9_-]{80,}$`).MatchString(o) {
		t.Errorf("openai token %q is not shaped like an OpenAI project key", o)
	}
	if _, err := NewTokens(make([]byte, 16)); err == nil {
		t.Error("a 16-byte key was accepted")
	}
	if _, err := tk.Mint(strings.Repeat("x", MaxSandboxID+1)); err == nil {
		t.Error("an overlong sandbox id was accepted")
	}
}

// The audience matrix: a token is good only on its own sandbox's route for its own provider.
func TestTokenAudience(t *testing.T) {
	tk := newTokens(t)
	_, tokA := mint(t, tk, "sandbox-a", Anthropic)
	startO, tokO := mint(t, tk, "sandbox-a", OpenAI)
	// One character of the signed part changed to another.
	altered := []byte(tokA)
	if i := len(altered) / 2; altered[i] == 'A' {
		altered[i] = 'B'
	} else {
		altered[i] = 'A'
	}
	for _, tc := range []struct {
		token    string
		sandbox  string
		provider Provider
		status   int
		code     string
	}{
		{tokA, "sandbox-a", Anthropic, 0, ""},
		{tokO, "sandbox-a", OpenAI, 0, ""},
		{tokA, "sandbox-b", Anthropic, http.StatusForbidden, CodeWrongAudience},
		{tokA, "sandbox-a", OpenAI, http.StatusForbidden, CodeWrongAudience},
		{tokO, "sandbox-a", Anthropic, http.StatusForbidden, CodeWrongAudience},
		{tokO, "sandbox-b", Anthropic, http.StatusForbidden, CodeWrongAudience},
		{"sk-ant-api03-realkeyAA", "sandbox-a", Anthropic, http.StatusUnauthorized, CodeInvalidToken},
		{"", "sandbox-a", Anthropic, http.StatusUnauthorized, CodeInvalidToken},
		{string(altered), "sandbox-a", Anthropic, http.StatusUnauthorized, CodeInvalidToken},
		{tokA + "x", "sandbox-a", Anthropic, http.StatusUnauthorized, CodeInvalidToken},
	} {
		s, e := tk.Verify(tc.token, tc.sandbox, tc.provider)
		switch {
		case tc.status == 0 && e != nil:
			t.Errorf("%.30s… on %s/%s: %v", tc.token, tc.sandbox, tc.provider, e)
		case tc.status == 0 && s.SandboxID != "sandbox-a":
			t.Errorf("%.30s…: start %+v", tc.token, s)
		case tc.status != 0 && (e == nil || e.Status != tc.status || e.Code != tc.code):
			t.Errorf("%.30s… on %s/%s: %v, want %d %s", tc.token, tc.sandbox, tc.provider, e, tc.status, tc.code)
		}
	}

	// A token minted by another daemon's key fails its signature.
	other, err := NewTokens(testKey(8))
	if err != nil {
		t.Fatal(err)
	}
	if _, e := other.Verify(tokA, "sandbox-a", Anthropic); e == nil || e.Code != CodeInvalidToken {
		t.Errorf("another key: %v", e)
	}
	// Changing the sandbox id inside the token breaks the signature: it is invalid, not
	// wrong_audience, since nothing in it can be trusted.
	body, _ := strings.CutSuffix(strings.TrimPrefix(tokA, tokenShape[Anthropic].prefix), "AA")
	raw, _ := base64.RawURLEncoding.DecodeString(body)
	raw[headerSize] ^= 1
	forged := tokenShape[Anthropic].prefix + base64.RawURLEncoding.EncodeToString(raw) + "AA"
	if _, e := tk.Verify(forged, "sandbox-a", Anthropic); e == nil || e.Code != CodeInvalidToken {
		t.Errorf("altered sandbox id: %v", e)
	}

	// Revoked: 401, yet the audience is still checked first.
	tk.Revoke(startO.ID)
	if _, e := tk.Verify(tokO, "sandbox-a", OpenAI); e == nil || e.Status != http.StatusUnauthorized {
		t.Errorf("revoked start: %v", e)
	}
	if _, e := tk.Verify(tokO, "sandbox-b", OpenAI); e == nil || e.Code != CodeWrongAudience {
		t.Errorf("revoked start replayed on another sandbox: %v", e)
	}
	if _, e := tk.Verify(tokA, "sandbox-a", Anthropic); e != nil {
		t.Errorf("revoking one start ended another: %v", e)
	}
	tk.RevokeSandbox("sandbox-a")
	if _, e := tk.Verify(tokA, "sandbox-a", Anthropic); e == nil || e.Status != http.StatusUnauthorized {
		t.Errorf("after RevokeSandbox: %v", e)
	}
}

// A restarted daemon knows no start until it restores them; with the same key the tokens are
// then good again, with another key never.
func TestTokenRestore(t *testing.T) {
	tk := newTokens(t)
	_, tok := mint(t, tk, "sb", Anthropic)
	starts := tk.Starts()

	restarted := newTokens(t)
	if _, e := restarted.Verify(tok, "sb", Anthropic); e == nil || e.Status != http.StatusUnauthorized {
		t.Fatalf("before Restore: %v", e)
	}
	restarted.Restore(starts)
	if _, e := restarted.Verify(tok, "sb", Anthropic); e != nil {
		t.Fatalf("after Restore: %v", e)
	}
	again, err := restarted.Token(starts[0], Anthropic)
	if err != nil || again != tok {
		t.Errorf("Token after Restore %q (%v), want the same token %q", again, err, tok)
	}

	rekeyed, err := NewTokens(testKey(9))
	if err != nil {
		t.Fatal(err)
	}
	rekeyed.Restore(starts)
	if _, e := rekeyed.Verify(tok, "sb", Anthropic); e == nil || e.Code != CodeInvalidToken {
		t.Errorf("restored under another key: %v", e)
	}
}

// The ChatGPT route's token is a JWT that Codex reads as a ChatGPT access token that never
// expires; its claims are its start's, so an altered one is refused like a forged one.
func TestChatGPTTokenShape(t *testing.T) {
	tk := newTokens(t)
	s, tok := mint(t, tk, "sandbox-a", ChatGPT)
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("%q is not a JWT", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp  int64 `json:"exp"`
		Auth struct {
			Account string `json:"chatgpt_account_id"`
		} `json:"https://api.openai.com/auth"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	if time.Unix(claims.Exp, 0).Before(time.Now().AddDate(50, 0, 0)) || claims.Auth.Account != PlaceholderAccountID {
		t.Errorf("claims %+v: want an exp decades away and the placeholder account", claims)
	}
	if got, e := tk.Verify(tok, "sandbox-a", ChatGPT); e != nil || got != s {
		t.Errorf("Verify: %v %v", got, e)
	}
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1}`)) + "." + parts[2]
	if _, e := tk.Verify(forged, "sandbox-a", ChatGPT); e == nil || e.Code != CodeInvalidToken {
		t.Errorf("altered claims: %v, want %s", e, CodeInvalidToken)
	}
	ph, err := tk.ChatGPTPlaceholders(s, "pro")
	if err != nil {
		t.Fatal(err)
	}
	if ph.AccessToken != tok || !strings.HasPrefix(ph.RefreshToken, RefreshTokenPrefix) || ph.AccountID != PlaceholderAccountID {
		t.Errorf("placeholders %+v", ph)
	}
	if got, e := tk.VerifyRefresh(ph.RefreshToken, "sandbox-a"); e != nil || got != s {
		t.Errorf("VerifyRefresh: %v %v", got, e)
	}
	if _, e := tk.VerifyRefresh(ph.RefreshToken, "sandbox-b"); e == nil || e.Code != CodeWrongAudience {
		t.Errorf("VerifyRefresh on another sandbox: %v", e)
	}
	idClaims, _ := base64.RawURLEncoding.DecodeString(strings.Split(ph.IDToken, ".")[1])
	if !strings.Contains(string(idClaims), `"chatgpt_plan_type":"pro"`) || !strings.Contains(string(idClaims), PlaceholderEmail) {
		t.Errorf("id token claims %s: want the plan and the placeholder email", idClaims)
	}
}
