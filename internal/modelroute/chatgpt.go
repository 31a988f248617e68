package modelroute

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// A ChatGPT login: Codex runs in ChatGPT mode against the route's /chatgpt/ path with a
// placeholder login in its auth.json, whose tokens ChatGPTPlaceholders makes for one harness
// start. The access token is the start's route token for ChatGPT, shaped as a JWT that never
// expires; the route swaps in the login's real access token and account on the way to the
// ChatGPT backend, and answers Codex's own refresh at /chatgpt/oauth/token itself, with the same
// placeholders: sandboxd alone refreshes the real login (internal/logins).

// Placeholders the sandbox sees in place of the login's own account and identity. The account
// id is an identifier of the operator's workspace rather than a credential, but the sandbox
// has no use for it: the route sets the real one in chatgpt-account-id.
const (
	PlaceholderAccountID = "hiloop-placeholder-account"
	PlaceholderEmail     = "codex@hiloop.invalid"
	PlaceholderUserID    = "hiloop-placeholder-user"
)

// RefreshTokenPrefix starts every placeholder refresh token; what follows is the signed part of
// the start's access token. The codex adapter recognises the auth.json it wrote by it.
const RefreshTokenPrefix = "rt_hiloop_"

// placeholderExpiry is the exp of every placeholder JWT (2100-01-01): Codex refreshes an access
// token whose exp has passed, and the placeholder's never does.
const placeholderExpiry = 4102444800

// authClaim is the claim Codex reads a ChatGPT login's account and plan from.
const authClaim = "https://api.openai.com/auth"

// chatGPTTokenHead is the JOSE header of the placeholder JWTs, base64url: no algorithm anyone
// checks (Codex reads the claims without verifying; the route checks the signed part itself).
var chatGPTTokenHead = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"hiloop-model-route"}`))

// placeholderJWT encodes claims as a JWT with the given third part.
func placeholderJWT(claims map[string]any, sig string) string {
	b, _ := json.Marshal(claims) // cannot fail: strings, numbers and maps of them
	return chatGPTTokenHead + "." + base64.RawURLEncoding.EncodeToString(b) + "." + sig
}

// chatGPTToken is the start's ChatGPT route token: a JWT whose claims are fixed by the start
// and whose third part is the signed body the other token shapes carry.
func chatGPTToken(s Start, body string) string {
	return placeholderJWT(map[string]any{
		"iss": "hiloop", "iat": s.Issued.Unix(), "exp": placeholderExpiry,
		authClaim: map[string]any{"chatgpt_account_id": PlaceholderAccountID},
	}, body)
}

// ChatGPTTokens are a ChatGPT login's tokens as Codex keeps them in auth.json ("tokens") and
// as the OAuth token endpoint answers a refresh.
type ChatGPTTokens struct {
	IDToken      string `json:"id_token"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	AccountID    string `json:"account_id,omitempty"`
}

// ChatGPTPlaceholders returns the placeholder login of harness start s, for a login on the
// given plan (the chatgpt_plan_type claim, "" when unknown): the access token is the start's
// ChatGPT route token, the refresh token names the start, the id token carries the plan and
// the placeholder account and email. The same start and plan always give the same tokens.
func (t *Tokens) ChatGPTPlaceholders(s Start, plan string) (ChatGPTTokens, error) {
	access, err := t.Token(s, ChatGPT)
	if err != nil {
		return ChatGPTTokens{}, err
	}
	auth := map[string]any{"chatgpt_account_id": PlaceholderAccountID, "chatgpt_user_id": PlaceholderUserID}
	if plan != "" {
		auth["chatgpt_plan_type"] = plan
	}
	id := placeholderJWT(map[string]any{
		"iss": "hiloop", "iat": s.Issued.Unix(), "exp": placeholderExpiry,
		"email": PlaceholderEmail, "email_verified": true, authClaim: auth,
	}, base64.RawURLEncoding.EncodeToString([]byte("hiloop-placeholder")))
	_, signed, _ := strings.Cut(strings.TrimPrefix(access, chatGPTTokenHead+"."), ".")
	return ChatGPTTokens{IDToken: id, AccessToken: access, RefreshToken: RefreshTokenPrefix + signed,
		AccountID: PlaceholderAccountID}, nil
}

// VerifyRefresh checks a placeholder refresh token presented on sandboxID's route, as Verify
// checks an access token, and returns its start.
func (t *Tokens) VerifyRefresh(token, sandboxID string) (Start, *Error) {
	body, ok := strings.CutPrefix(token, RefreshTokenPrefix)
	if !ok {
		return Start{}, &Error{Status: http.StatusUnauthorized, Code: CodeInvalidToken,
			Message: "the refresh token is not a hiloop placeholder: the sandbox never holds a real one"}
	}
	return t.verifyBody(body, ChatGPT, sandboxID, ChatGPT)
}

// maxOAuthBody bounds a refresh request; Codex's is a few hundred bytes.
const maxOAuthBody = 64 << 10

// serveOAuth answers the OAuth requests Codex makes of the ChatGPT login's issuer, pointed at
// the route by CODEX_REFRESH_TOKEN_URL_OVERRIDE and CODEX_REVOKE_TOKEN_URL_OVERRIDE: a refresh
// gets the start's placeholders again (never a request upstream: sandboxd refreshes the real
// login, and a refresh from each sandbox would spend the rotating refresh token under the
// others), a revocation (Codex's logout) is acknowledged. Reports whether path was one of them.
func (rt *Route) serveOAuth(w http.ResponseWriter, r *http.Request, rest string) bool {
	switch rest {
	case "/oauth/revoke":
		if r.Method != http.MethodPost {
			return false
		}
		writeJSON(w, http.StatusOK, map[string]any{})
		return true
	case "/oauth/token":
		if r.Method != http.MethodPost {
			return false
		}
	default:
		return false
	}
	refused := func(e *Error) {
		if rt.cfg.HarnessRefresh != nil {
			rt.cfg.HarnessRefresh(rt.sandbox, e.Message)
		}
		// Codex gives up on a 401 whose error.code says the refresh token is no good, and asks
		// for a new sign-in: right for a start that has ended.
		writeJSON(w, e.Status, map[string]any{"error": map[string]any{
			"message": e.Message, "type": "invalid_request_error", "param": nil, "code": oauthCode(e.Status)}})
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxOAuthBody))
	if err != nil {
		return true // the sandbox went away
	}
	var req struct {
		GrantType    string `json:"grant_type"`
		RefreshToken string `json:"refresh_token"`
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" {
		form, _ := url.ParseQuery(string(raw))
		req.GrantType, req.RefreshToken = form.Get("grant_type"), form.Get("refresh_token")
	} else {
		json.Unmarshal(raw, &req)
	}
	if req.GrantType != "refresh_token" || req.RefreshToken == "" {
		refused(&Error{Status: http.StatusBadRequest, Code: CodeBadRequest,
			Message: "the token endpoint of the model route takes grant_type=refresh_token with a refresh_token"})
		return true
	}
	s, e := rt.cfg.Tokens.VerifyRefresh(req.RefreshToken, rt.sandbox)
	if e != nil {
		refused(e)
		return true
	}
	var plan string
	if c, err := rt.cfg.Credential(r.Context(), rt.sandbox, ChatGPT); err == nil {
		plan = c.PlanType
	}
	tok, err := rt.cfg.Tokens.ChatGPTPlaceholders(s, plan)
	if err != nil {
		refused(&Error{Status: http.StatusInternalServerError, Code: CodeUpstream, Message: err.Error()})
		return true
	}
	if rt.cfg.HarnessRefresh != nil {
		rt.cfg.HarnessRefresh(rt.sandbox, "")
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id_token": tok.IDToken, "access_token": tok.AccessToken, "refresh_token": tok.RefreshToken,
		"token_type": "Bearer", "expires_in": placeholderExpiry - s.Issued.Unix(),
	})
	return true
}

// oauthCode is the error.code of a refused refresh: refresh_token_invalidated (on which Codex
// stops trying) for a token that is not a live start's, invalid_request otherwise.
func oauthCode(status int) string {
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return "refresh_token_invalidated"
	}
	return "invalid_request"
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, `{"error":{"message":%q}}`, err.Error())
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b)
}
