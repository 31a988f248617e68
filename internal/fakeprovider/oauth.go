package fakeprovider

import (
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"time"
)

// OAuthClientID is the client id the fake puts in the id tokens it issues: Codex's, which
// Codex sends in its refresh requests.
const OAuthClientID = "app_EMoamEEZ73f0CkXaXp7hrann"

// oauthState is the token endpoint's state, guarded by the Server's mutex.
type oauthState struct {
	current  string               // the refresh token the endpoint accepts now
	rotated  map[string]bool      // refresh tokens that were current once: reuse is refused as such
	revoked  map[string]bool      // refresh tokens revoked by RevokeRefreshToken
	accessed map[string]time.Time // issued access tokens and their expiry
	calls    int
}

func (o *oauthState) init(refreshToken string) {
	if refreshToken == "" {
		refreshToken = newID("rt_")
	}
	o.current = refreshToken
	o.rotated = map[string]bool{}
	o.revoked = map[string]bool{}
	o.accessed = map[string]time.Time{}
}

// RefreshToken returns the refresh token the token endpoint accepts now.
func (s *Server) RefreshToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oauth.current
}

// TokenCalls returns how many requests reached the token endpoint, refused ones included.
func (s *Server) TokenCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oauth.calls
}

// RevokeRefreshToken makes the current refresh token invalid, as a provider does when the user
// signs out elsewhere: the next refresh fails with refresh_token_invalidated.
func (s *Server) RevokeRefreshToken() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.oauth.revoked[s.oauth.current] = true
	s.oauth.current = ""
}

// accessTokenValid reports whether token is an access token the endpoint issued that has not
// expired.
func (s *Server) accessTokenValid(token string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.oauth.accessed[token]
	return ok && now.Before(exp)
}

// tokenRequest is a refresh request, sent as JSON (Codex) or as a form (the OAuth standard).
type tokenRequest struct {
	GrantType    string `json:"grant_type"`
	RefreshToken string `json:"refresh_token"`
	ClientID     string `json:"client_id"`
}

// oauthToken serves POST /oauth/token with grant_type=refresh_token: a new access token, id
// token and refresh token for the current refresh token, which is then spent.
func (s *Server) oauthToken(w *recordingWriter, r *http.Request, body []byte) {
	s.mu.Lock()
	s.oauth.calls++
	s.mu.Unlock()

	var req tokenRequest
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			w.fail("bad form: " + err.Error())
			oauthError(w, http.StatusBadRequest, "invalid_request", "The request body is not a valid form.")
			return
		}
		req = tokenRequest{GrantType: form.Get("grant_type"), RefreshToken: form.Get("refresh_token"), ClientID: form.Get("client_id")}
	} else if err := json.Unmarshal(body, &req); err != nil {
		w.fail("bad JSON: " + err.Error())
		oauthError(w, http.StatusBadRequest, "invalid_request", "The request body is not valid JSON.")
		return
	}
	switch {
	case req.GrantType != "refresh_token":
		w.fail("grant_type " + req.GrantType)
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "Only grant_type=refresh_token is supported.")
		return
	case req.RefreshToken == "":
		w.fail("no refresh_token")
		oauthError(w, http.StatusBadRequest, "invalid_request", "Missing required parameter: refresh_token.")
		return
	}

	now := time.Now()
	s.mu.Lock()
	o := &s.oauth
	var code, msg string
	switch {
	case req.RefreshToken == o.current:
	case o.rotated[req.RefreshToken]:
		code, msg = "refresh_token_reused", "Your refresh token has already been used to generate a new access token. Please try signing in again."
	case o.revoked[req.RefreshToken]:
		code, msg = "refresh_token_invalidated", "Your refresh token has been invalidated. Please try signing in again."
	default:
		code, msg = "refresh_token_invalidated", "Your refresh token is not valid. Please try signing in again."
	}
	if code != "" {
		s.mu.Unlock()
		w.fail(code)
		// Codex reads a refused refresh from a 401 whose error.code says why: only then does it
		// give up and ask the user to sign in again.
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{
			"message": msg, "type": "invalid_request_error", "param": nil, "code": code,
		}})
		return
	}
	ttl := s.cfg.AccessTokenTTL
	access := fakeJWT(map[string]any{
		"iss": "https://auth.openai.com", "aud": []string{"https://api.openai.com/v1"},
		"iat": now.Unix(), "exp": now.Add(ttl).Unix(), "jti": newID(""),
		"https://api.openai.com/auth": map[string]any{
			"chatgpt_account_id": "acct-fake", "chatgpt_user_id": "user-fake", "chatgpt_plan_type": "pro",
		},
	})
	id := fakeJWT(map[string]any{
		"iss": "https://auth.openai.com", "aud": []string{OAuthClientID}, "email": "fake@example.test",
		"iat": now.Unix(), "exp": now.Add(ttl).Unix(),
		"https://api.openai.com/auth": map[string]any{
			"chatgpt_account_id": "acct-fake", "chatgpt_user_id": "user-fake", "chatgpt_plan_type": "pro",
		},
	})
	next := newID("rt_")
	o.rotated[o.current] = true
	o.current = next
	o.accessed[access] = now.Add(ttl)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": access, "id_token": id, "refresh_token": next,
		"token_type": "Bearer", "expires_in": int(ttl.Seconds()), "scope": "openid profile email offline_access",
	})
}

// oauthError answers in the OAuth 2.0 error format (RFC 6749, 5.2).
func oauthError(w http.ResponseWriter, status int, code, description string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}

// fakeJWT returns a JWT-shaped token carrying claims, with a signature nobody can check: Codex
// and sandboxd read the claims (exp, the account) without verifying.
func fakeJWT(claims map[string]any) string {
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": "fake"})
	payload, _ := json.Marshal(claims)
	return enc.EncodeToString(header) + "." + enc.EncodeToString(payload) + "." + enc.EncodeToString([]byte(newID("sig_")))
}
