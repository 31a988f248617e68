package logins

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// The ChatGPT login's refresh: sandboxd is the only place it happens. The refresh token
// changes on every refresh and an old one is refused, so if each sandbox refreshed on its own
// the first would log out all the others.
const (
	// DefaultTokenURL is OpenAI's OAuth token endpoint, the one Codex refreshes at.
	DefaultTokenURL = "https://auth.openai.com/oauth/token"
	// CodexClientID is the OAuth client Codex's logins are issued to; a refresh must name it.
	CodexClientID = "app_EMoamEEZ73f0CkXaXp7hrann"
	// MinRefreshInterval is the least time between two refreshes, however many sandboxes ask.
	MinRefreshInterval = time.Minute
	// RenewBefore is how long before its access token expires a login is renewed.
	RenewBefore = time.Hour
	// CheckEvery is how often Run looks at the expiry.
	CheckEvery = 5 * time.Minute
)

// Refresher renews ChatGPT logins at an OAuth token endpoint.
type Refresher struct {
	// TokenURL is the endpoint; "" means DefaultTokenURL.
	TokenURL string
	// Client sends the request (it must verify TLS); nil means http.DefaultClient.
	Client *http.Client
}

func (r *Refresher) tokenURL() string {
	if r.TokenURL != "" {
		return r.TokenURL
	}
	return DefaultTokenURL
}

func (r *Refresher) client() *http.Client {
	if r.Client != nil {
		return r.Client
	}
	return http.DefaultClient
}

// rejected is a refresh the provider refused for good: the login must be added again.
type rejected struct{ msg string }

func (e *rejected) Error() string { return e.msg }

// refresh asks the endpoint for new tokens.
func (r *Refresher) refresh(ctx context.Context, t chatGPTTokens) (chatGPTTokens, error) {
	body, _ := json.Marshal(map[string]string{
		"client_id":     CodexClientID,
		"grant_type":    "refresh_token",
		"refresh_token": t.RefreshToken,
		"scope":         "openid profile email",
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.tokenURL(), bytes.NewReader(body))
	if err != nil {
		return t, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client().Do(req)
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return t, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error            any    `json:"error"`
			ErrorDescription string `json:"error_description"`
		}
		json.Unmarshal(raw, &e)
		msg := fmt.Sprintf("the token endpoint answered %s", resp.Status)
		if e.Error != nil {
			msg += fmt.Sprintf(": %v", e.Error)
		}
		if e.ErrorDescription != "" {
			msg += " (" + e.ErrorDescription + ")"
		}
		// A client error is the provider's verdict on the refresh token; a server error or a
		// rate limit may pass.
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			return t, &rejected{msg}
		}
		return t, errors.New(msg)
	}
	var n chatGPTTokens
	if err := json.Unmarshal(raw, &n); err != nil || n.AccessToken == "" {
		return t, fmt.Errorf("the token endpoint's answer has no access_token")
	}
	// A refresh answer may leave out what did not change.
	if n.RefreshToken == "" {
		n.RefreshToken = t.RefreshToken
	}
	if n.IDToken == "" {
		n.IDToken = t.IDToken
	}
	if n.AccountID == "" {
		n.AccountID = t.AccountID
	}
	return n, nil
}

// RefreshChatGPT renews the access token of user's codex login now, unless one was attempted
// less than MinRefreshInterval ago: callers at the same moment share one request, and each
// gets the login as it then is. It is what a harness's own refresh attempt leads to.
func (s *Store) RefreshChatGPT(ctx context.Context, user string, now time.Time) error {
	if s.Refresh == nil {
		return errors.New("logins: no refresher")
	}
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	if last, ok := s.lastAttempt[user]; ok && now.Sub(last) < MinRefreshInterval {
		return nil
	}
	rec, err := s.get(user, api.LoginCodex)
	if err != nil {
		return err
	}
	if rec.Kind != api.LoginChatGPT || rec.Status != api.LoginOK {
		return nil
	}
	s.lastAttempt[user] = now
	key := loginKey(user, api.LoginCodex)
	plain, err := s.sealer.Open(purpose(key), rec.Sealed)
	if err != nil {
		return fmt.Errorf("logins: open the codex login: %w", err)
	}
	var t chatGPTTokens
	if err := json.Unmarshal(plain, &t); err != nil {
		return fmt.Errorf("logins: decode the codex login: %w", err)
	}
	n, err := s.Refresh.refresh(ctx, t)
	var rj *rejected
	switch {
	case errors.As(err, &rj):
		rec.Status, rec.StatusMessage, rec.UpdatedAt = api.LoginNeedsReconnect, rj.msg, now
	case err != nil:
		s.audit(api.AuditRecord{Time: now, Action: api.AuditLoginRefreshFailed, Provider: api.LoginCodex, Kind: rec.Kind, Owner: user, Message: err.Error()})
		return fmt.Errorf("logins: refresh the codex login: %w", err)
	default:
		exp, err := jwtExpiry(n.AccessToken)
		if err != nil {
			exp = now.Add(RenewBefore) // unknown: try again when Run next looks
		}
		sealed, _ := json.Marshal(n)
		rec.Sealed = s.sealer.Seal(purpose(key), sealed)
		rec.ExpiresAt, rec.RefreshedAt, rec.UpdatedAt = exp, now, now
	}
	stored := rec.UpdatedAt
	err = s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketLogins)
		var cur record
		ok, err := getJSON(b, []byte(key), &cur)
		if err != nil || !ok || cur.Fingerprint != rec.Fingerprint {
			return err // removed or replaced meanwhile: the new login wins
		}
		return putJSON(b, []byte(key), rec)
	})
	if err != nil {
		return fmt.Errorf("logins: store the refreshed codex login: %w", err)
	}
	if rec.Status == api.LoginNeedsReconnect {
		s.audit(api.AuditRecord{Time: stored, Action: api.AuditLoginRefreshFailed, Provider: api.LoginCodex, Kind: rec.Kind, Owner: user, Message: rec.StatusMessage + "; the login needs reconnecting"})
		return api.Errorf(api.CodeLoginNeedsReconnect, "the codex login needs reconnecting (%s): add it again with `hiloop login add codex`", rec.StatusMessage)
	}
	s.audit(api.AuditRecord{Time: stored, Action: api.AuditLoginRefreshed, Provider: api.LoginCodex, Kind: rec.Kind, Owner: user})
	return nil
}

// Run renews every user's ChatGPT login RenewBefore its access token expires, looking every
// CheckEvery, until ctx ends.
func (s *Store) Run(ctx context.Context, log func(msg string, args ...any)) {
	tick := time.NewTicker(CheckEvery)
	defer tick.Stop()
	for {
		all, err := s.List("")
		if err != nil && log != nil {
			log("list the logins to renew", "err", err)
		}
		for _, l := range all {
			if l.Provider != api.LoginCodex || l.Kind != api.LoginChatGPT || l.Status != api.LoginOK ||
				(l.ExpiresAt != nil && time.Until(*l.ExpiresAt) >= RenewBefore) {
				continue
			}
			if err := s.RefreshChatGPT(ctx, l.Owner, time.Now()); err != nil && log != nil {
				log("refresh the codex chatgpt login", "owner", l.Owner, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// jwtExpiry reads the exp claim of a JWT without checking its signature: the daemon only needs
// to know when to renew it; the provider checks it.
func jwtExpiry(token string) (time.Time, error) {
	claims, err := jwtClaims(token)
	if err != nil {
		return time.Time{}, err
	}
	exp, ok := claims["exp"].(float64)
	if !ok {
		return time.Time{}, errors.New("the token has no exp claim")
	}
	return time.Unix(int64(exp), 0).UTC(), nil
}

// planType reads the ChatGPT plan from an id token's claims, "" when it has none.
func planType(idToken string) string {
	claims, err := jwtClaims(idToken)
	if err != nil {
		return ""
	}
	auth, _ := claims["https://api.openai.com/auth"].(map[string]any)
	plan, _ := auth["chatgpt_plan_type"].(string)
	return plan
}

// jwtClaims decodes the payload of a JWT without checking its signature.
func jwtClaims(token string) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, errors.New("not a JWT: its payload is not base64url")
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		return nil, errors.New("not a JWT: its payload is not JSON")
	}
	return claims, nil
}

// UnsignedJWT encodes claims as a JWT whose signature is a fixed marker: shaped like a token,
// worth nothing to anyone who checks it. The tests of the packages that read logins make their
// ChatGPT access tokens with it.
func UnsignedJWT(claims map[string]any) string {
	head := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"hiloop-placeholder"}`))
	body, _ := json.Marshal(claims)
	return head + "." + base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString([]byte("hiloop-placeholder"))
}
