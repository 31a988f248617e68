package fakeprovider

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	IDToken      string `json:"id_token"`
	RefreshToken string `json:"refresh_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	Scope        string `json:"scope"`
}

// refresh asks the token endpoint as Codex does: JSON with its client id.
func refresh(t *testing.T, base, token string) (int, []byte) {
	t.Helper()
	resp, body := post(t, base+"/oauth/token", nil, map[string]string{
		"client_id": OAuthClientID, "grant_type": "refresh_token", "refresh_token": token,
	})
	return resp.StatusCode, body
}

// claims decodes a JWT's payload without checking its signature, as Codex does.
func claims(t *testing.T, jwt string) map[string]any {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("%q is not a JWT", jwt)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func wantRefused(t *testing.T, status int, body []byte, code string) {
	t.Helper()
	var e openAIErrorBody
	decodeStrict(t, body, &e)
	if status != http.StatusUnauthorized || e.Error.Code == nil || *e.Error.Code != code {
		t.Errorf("refresh answered %d %s, want 401 with error.code %s", status, body, code)
	}
}

func TestRefreshRotates(t *testing.T) {
	s, base := newTestServer(t, Config{RefreshToken: "rt-initial", AccessTokenTTL: 10 * time.Minute, OpenAIKeys: []string{"sk-openai-real"}})
	status, body := refresh(t, base, "rt-initial")
	var tok tokenResponse
	decodeStrict(t, body, &tok)
	if status != 200 || tok.RefreshToken == "" || tok.RefreshToken == "rt-initial" || tok.TokenType != "Bearer" || tok.ExpiresIn != 600 {
		t.Fatalf("refresh: %d %s", status, body)
	}
	if s.RefreshToken() != tok.RefreshToken {
		t.Errorf("RefreshToken() = %q, want the issued %q", s.RefreshToken(), tok.RefreshToken)
	}
	c := claims(t, tok.AccessToken)
	if exp, _ := c["exp"].(float64); time.Until(time.Unix(int64(exp), 0)) <= 9*time.Minute {
		t.Errorf("access token exp %v, want about ten minutes ahead", c["exp"])
	}
	if auth, _ := claims(t, tok.IDToken)["https://api.openai.com/auth"].(map[string]any); auth["chatgpt_account_id"] == nil {
		t.Errorf("id token claims %v lack the ChatGPT account", claims(t, tok.IDToken))
	}

	// The issued access token is a credential for the OpenAI APIs; a made-up one is not.
	if resp, body := post(t, base+"/v1/responses", map[string]string{"Authorization": "Bearer " + tok.AccessToken}, map[string]any{"model": "m", "input": "hi"}); resp.StatusCode != 200 {
		t.Errorf("responses with the issued access token: %d %s", resp.StatusCode, body)
	}
	if resp, _ := post(t, base+"/v1/responses", map[string]string{"Authorization": "Bearer " + tok.AccessToken + "x"}, map[string]any{"model": "m", "input": "hi"}); resp.StatusCode != 401 {
		t.Errorf("responses with a forged access token: %d, want 401", resp.StatusCode)
	}

	// The spent token is refused as reused; the new one works, sent as a form this time.
	status, body = refresh(t, base, "rt-initial")
	wantRefused(t, status, body, "refresh_token_reused")
	resp, body := post(t, base+"/oauth/token", map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
		url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}}.Encode())
	var next tokenResponse
	decodeStrict(t, body, &next)
	if resp.StatusCode != 200 || next.RefreshToken == tok.RefreshToken || next.AccessToken == tok.AccessToken {
		t.Fatalf("second refresh: %d %s", resp.StatusCode, body)
	}

	// Revoked: refused as invalidated, as is a token never issued.
	s.RevokeRefreshToken()
	status, body = refresh(t, base, next.RefreshToken)
	wantRefused(t, status, body, "refresh_token_invalidated")
	status, body = refresh(t, base, "rt-never-issued")
	wantRefused(t, status, body, "refresh_token_invalidated")

	// Malformed requests get the OAuth error format.
	resp, body = post(t, base+"/oauth/token", nil, map[string]string{"grant_type": "authorization_code", "code": "x"})
	var oe struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	decodeStrict(t, body, &oe)
	if resp.StatusCode != 400 || oe.Error != "unsupported_grant_type" {
		t.Errorf("authorization_code grant: %d %s", resp.StatusCode, body)
	}
	if n := s.TokenCalls(); n != 6 {
		t.Errorf("TokenCalls() = %d, want 6", n)
	}
}

func TestRefreshConcurrentOneWins(t *testing.T) {
	// Harnesses racing with one refresh token: exactly one gets new tokens, the rest are told
	// it was reused. This is what a gateway that refreshes once for everyone must prevent.
	s, base := newTestServer(t, Config{RefreshToken: "rt-shared"})
	const n = 20
	statuses := make([]int, n)
	var wg sync.WaitGroup
	body := `{"grant_type":"refresh_token","refresh_token":"rt-shared"}`
	for i := range n {
		wg.Go(func() {
			resp, err := http.Post(base+"/oauth/token", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	ok := 0
	for _, st := range statuses {
		switch st {
		case 200:
			ok++
		case 401:
		default:
			t.Errorf("status %d", st)
		}
	}
	if ok != 1 || s.TokenCalls() != n {
		t.Errorf("%d of %d refreshes succeeded (%d calls counted), want exactly 1", ok, n, s.TokenCalls())
	}
}
