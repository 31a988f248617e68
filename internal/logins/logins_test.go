package logins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/secrets"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

const apiKey = "sk-ant-api03-THE-REAL-KEY-0123456789"

// admin is the local admin, whose logins are kept under the bare provider.
const admin = identity.LocalAdmin

func open(t *testing.T) (*Store, string, *[]api.AuditRecord) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sec, err := secrets.Open(db.Owned("internal/secrets"), filepath.Join(dir, "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db.Owned("internal/logins"), sec)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var audit []api.AuditRecord
	s.Audit = func(r api.AuditRecord) {
		mu.Lock()
		defer mu.Unlock()
		audit = append(audit, r)
	}
	return s, path, &audit
}

func codeOf(err error) api.ErrorCode {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestAPIKeySealedAndNeverShown(t *testing.T) {
	s, path, audit := open(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l, err := s.Put(admin, api.LoginClaude, api.LoginPut{Kind: api.LoginAPIKey, Value: apiKey}, now)
	if err != nil {
		t.Fatal(err)
	}
	if l.Provider != api.LoginClaude || l.Kind != api.LoginAPIKey || l.Status != api.LoginOK ||
		!strings.HasPrefix(l.Fingerprint, "hmac-sha256:") {
		t.Fatalf("login %+v", l)
	}
	shown, _ := json.Marshal(l)
	if bytes.Contains(shown, []byte("REAL-KEY")) {
		t.Fatalf("the API shows the value: %s", shown)
	}
	c, err := s.Credential(admin, api.LoginClaude)
	if err != nil || c.Token != apiKey || c.Kind != api.LoginAPIKey {
		t.Fatalf("credential %+v %v", c, err)
	}
	if _, err := s.Credential(admin, api.LoginCodex); codeOf(err) != api.CodeLoginNotFound {
		t.Fatalf("codex credential without a login: %v", err)
	}

	// Replacing keeps the creation time and changes the fingerprint.
	later := now.Add(time.Hour)
	l2, err := s.Put(admin, api.LoginClaude, api.LoginPut{Kind: api.LoginOAuthToken, Value: "sk-ant-oat01-OTHER"}, later)
	if err != nil {
		t.Fatal(err)
	}
	if !l2.CreatedAt.Equal(now) || !l2.UpdatedAt.Equal(later) || l2.Fingerprint == l.Fingerprint || l2.Kind != api.LoginOAuthToken {
		t.Fatalf("replaced login %+v", l2)
	}
	list, err := s.List(admin)
	if err != nil || len(list) != 1 || list[0].Kind != api.LoginOAuthToken {
		t.Fatalf("list %+v %v", list, err)
	}

	if err := s.Delete(admin, api.LoginClaude, later); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Credential(admin, api.LoginClaude); codeOf(err) != api.CodeLoginNotFound {
		t.Fatalf("credential after delete: %v", err)
	}
	if err := s.Delete(admin, api.LoginClaude, later); codeOf(err) != api.CodeLoginNotFound {
		t.Fatalf("second delete: %v", err)
	}
	var actions []string
	for _, r := range *audit {
		actions = append(actions, r.Action+":"+string(r.Kind))
	}
	if got := strings.Join(actions, " "); got != "login_added:api-key login_added:oauth-token login_removed:oauth-token" {
		t.Fatalf("audit %s", got)
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{apiKey, "sk-ant-oat01-OTHER"} {
		if bytes.Contains(raw, []byte(v)) {
			t.Fatalf("the bbolt file holds %q in clear", v)
		}
	}
}

// jwt makes an access token that expires at exp.
func jwt(exp time.Time, id string) string {
	return UnsignedJWT(map[string]any{"exp": float64(exp.Unix()), "jti": id})
}

func authJSON(access, refresh string) string {
	idToken := UnsignedJWT(map[string]any{
		"email":                       "dev@example.test",
		"https://api.openai.com/auth": map[string]any{"chatgpt_plan_type": "pro", "chatgpt_account_id": "acct-1"},
		"secret_claim":                "not copied",
	})
	b, _ := json.Marshal(map[string]any{
		"OPENAI_API_KEY": nil,
		"tokens":         map[string]string{"id_token": idToken, "access_token": access, "refresh_token": refresh, "account_id": "acct-1"},
		"last_refresh":   "2026-11-01T00:00:00Z",
	})
	return string(b)
}

// tokenEndpoint answers refreshes as OpenAI's does: each refresh token works once.
type tokenEndpoint struct {
	mu    sync.Mutex
	valid string // the one refresh token that works
	n     int
	calls atomic.Int64
	exp   time.Time
}

func (e *tokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.calls.Add(1)
	var body map[string]string
	json.NewDecoder(r.Body).Decode(&body)
	e.mu.Lock()
	defer e.mu.Unlock()
	if body["grant_type"] != "refresh_token" || body["client_id"] != CodexClientID || body["refresh_token"] != e.valid {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant", "error_description": "refresh token reused"})
		return
	}
	e.n++
	e.valid = "refresh-" + string(rune('a'+e.n))
	json.NewEncoder(w).Encode(map[string]string{
		"access_token":  jwt(e.exp, "access-"+string(rune('a'+e.n))),
		"refresh_token": e.valid,
	})
}

func TestChatGPTRefreshOnceForManyAndRotates(t *testing.T) {
	s, path, audit := open(t)
	now := time.Now().UTC().Truncate(time.Second)
	ep := &tokenEndpoint{valid: "refresh-0", exp: now.Add(10 * 24 * time.Hour)}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	s.Refresh = &Refresher{TokenURL: srv.URL, Client: srv.Client()}

	first := jwt(now.Add(30*time.Minute), "access-0")
	l, err := s.Put(admin, api.LoginCodex, api.LoginPut{Kind: api.LoginChatGPT, Value: authJSON(first, "refresh-0")}, now)
	if err != nil {
		t.Fatal(err)
	}
	if l.ExpiresAt == nil || !l.ExpiresAt.Equal(now.Add(30*time.Minute)) {
		t.Fatalf("expiry %v", l.ExpiresAt)
	}

	// Twenty harness starts ask at once: one request reaches the endpoint.
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.RefreshChatGPT(context.Background(), admin, now); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := ep.calls.Load(); n != 1 {
		t.Fatalf("the token endpoint was called %d times, want 1", n)
	}
	c, err := s.Credential(admin, api.LoginCodex)
	// The refresh answer left out the id token: the plan is still the login's.
	if err != nil || c.Token != jwt(ep.exp, "access-b") || c.AccountID != "acct-1" || c.PlanType != "pro" {
		t.Fatalf("credential after refresh %+v %v", c, err)
	}
	l, _ = s.Get(admin, api.LoginCodex)
	if l.RefreshedAt == nil || !l.ExpiresAt.Equal(ep.exp) {
		t.Fatalf("login after refresh %+v", l)
	}

	// A minute later the next refresh uses the rotated refresh token (the old one is refused).
	if err := s.RefreshChatGPT(context.Background(), admin, now.Add(MinRefreshInterval)); err != nil {
		t.Fatal(err)
	}
	if n := ep.calls.Load(); n != 2 {
		t.Fatalf("calls %d, want 2", n)
	}
	if c, _ := s.Credential(admin, api.LoginCodex); c.Token != jwt(ep.exp, "access-c") {
		t.Fatalf("credential after the second refresh %+v", c)
	}

	// The provider refuses: the login needs reconnecting, and says so to whoever uses it.
	ep.mu.Lock()
	ep.valid = "something-else"
	ep.mu.Unlock()
	err = s.RefreshChatGPT(context.Background(), admin, now.Add(2*MinRefreshInterval))
	if codeOf(err) != api.CodeLoginNeedsReconnect || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("refused refresh: %v", err)
	}
	if _, err := s.Credential(admin, api.LoginCodex); codeOf(err) != api.CodeLoginNeedsReconnect {
		t.Fatalf("credential of a refused login: %v", err)
	}
	l, _ = s.Get(admin, api.LoginCodex)
	if l.Status != api.LoginNeedsReconnect || !strings.Contains(l.StatusMessage, "invalid_grant") {
		t.Fatalf("login %+v", l)
	}
	var actions []string
	for _, r := range *audit {
		actions = append(actions, r.Action)
	}
	if got := strings.Join(actions, " "); got != "login_added login_refreshed login_refreshed login_refresh_failed" {
		t.Fatalf("audit %s", got)
	}

	// Added again within the minute, the new login is refreshed at once all the same.
	ep.mu.Lock()
	ep.valid = "refresh-new"
	ep.mu.Unlock()
	if _, err := s.Put(admin, api.LoginCodex, api.LoginPut{Kind: api.LoginChatGPT, Value: authJSON(first, "refresh-new")}, now); err != nil {
		t.Fatal(err)
	}
	calls := ep.calls.Load()
	if err := s.RefreshChatGPT(context.Background(), admin, now.Add(2*MinRefreshInterval)); err != nil {
		t.Fatal(err)
	}
	if ep.calls.Load() != calls+1 {
		t.Fatalf("a login added again within a minute of a refused refresh was not refreshed")
	}
	if l, _ := s.Get(admin, api.LoginCodex); l.Status != api.LoginOK {
		t.Fatalf("the login added again: %+v", l)
	}

	raw, _ := os.ReadFile(path)
	for _, v := range []string{"refresh-0", "refresh-b", "refresh-c", "access-b"} {
		if bytes.Contains(raw, []byte(v)) {
			t.Fatalf("the bbolt file holds %q in clear", v)
		}
	}
}

// TestPerUser: each user has their own login per provider; one user's is not found for
// another (never forbidden), lists show the user's own, and a refresh renews only its owner's.
func TestPerUser(t *testing.T) {
	s, _, audit := open(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if _, err := s.Put(admin, api.LoginClaude, api.LoginPut{Kind: api.LoginAPIKey, Value: apiKey}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("bob", api.LoginClaude, api.LoginPut{Kind: api.LoginOAuthToken, Value: "sk-ant-oat01-BOB"}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("bob", api.LoginCodex, api.LoginPut{Kind: api.LoginAPIKey, Value: "sk-proj-BOB"}, now); err != nil {
		t.Fatal(err)
	}
	// The same provider for two users: each credential is its owner's.
	if c, err := s.Credential(admin, api.LoginClaude); err != nil || c.Token != apiKey {
		t.Fatalf("admin's claude credential %+v %v", c, err)
	}
	if c, err := s.Credential("bob", api.LoginClaude); err != nil || c.Token != "sk-ant-oat01-BOB" || c.Kind != api.LoginOAuthToken {
		t.Fatalf("bob's claude credential %+v %v", c, err)
	}
	// Another user's login is not found, in the very words of a login nobody has.
	_, errOther := s.Credential(admin, api.LoginCodex)
	_, errNone := s.Credential("carol", api.LoginCodex)
	if codeOf(errOther) != api.CodeLoginNotFound || errOther.Error() != errNone.Error() {
		t.Fatalf("admin asking for a codex login only bob has: %v; carol, who nobody gave one: %v", errOther, errNone)
	}
	if _, err := s.Get("carol", api.LoginClaude); codeOf(err) != api.CodeLoginNotFound {
		t.Fatalf("carol's claude login: %v", err)
	}
	if err := s.Delete("carol", api.LoginClaude, now); codeOf(err) != api.CodeLoginNotFound {
		t.Fatalf("carol deleting: %v", err)
	}
	owners := func(list []api.Login) string {
		var out []string
		for _, l := range list {
			out = append(out, l.Owner+"/"+string(l.Provider))
		}
		return strings.Join(out, " ")
	}
	if l, err := s.List("bob"); err != nil || owners(l) != "bob/claude bob/codex" {
		t.Fatalf("bob's list %s %v", owners(l), err)
	}
	if l, err := s.List(admin); err != nil || owners(l) != "admin/claude" {
		t.Fatalf("admin's own list %s %v", owners(l), err)
	}
	if l, err := s.List(""); err != nil || owners(l) != "admin/claude bob/claude bob/codex" {
		t.Fatalf("every user's list %s %v", owners(l), err)
	}
	// Deleting bob's leaves admin's.
	if err := s.Delete("bob", api.LoginClaude, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Credential(admin, api.LoginClaude); err != nil {
		t.Fatalf("admin's claude login after bob deleted his: %v", err)
	}
	var rec []string
	for _, r := range *audit {
		rec = append(rec, r.Action+":"+r.Owner+"/"+string(r.Provider))
	}
	if got := strings.Join(rec, " "); got != "login_added:admin/claude login_added:bob/claude login_added:bob/codex login_removed:bob/claude" {
		t.Fatalf("audit %s", got)
	}
}

// TestChatGPTRefreshPerUser: two users' ChatGPT logins refresh apart, each with its own
// refresh token, and one's refresh does not hold back the other's within the minute.
func TestChatGPTRefreshPerUser(t *testing.T) {
	s, _, _ := open(t)
	now := time.Now().UTC().Truncate(time.Second)
	ep := &tokenEndpoint{valid: "refresh-0", exp: now.Add(10 * 24 * time.Hour)}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	s.Refresh = &Refresher{TokenURL: srv.URL, Client: srv.Client()}
	first := jwt(now.Add(30*time.Minute), "access-0")
	if _, err := s.Put("bob", api.LoginCodex, api.LoginPut{Kind: api.LoginChatGPT, Value: authJSON(first, "refresh-0")}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(admin, api.LoginCodex, api.LoginPut{Kind: api.LoginChatGPT, Value: authJSON(first, "refresh-admin")}, now); err != nil {
		t.Fatal(err)
	}
	if err := s.RefreshChatGPT(context.Background(), "bob", now); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Credential("bob", api.LoginCodex); c.Token != jwt(ep.exp, "access-b") {
		t.Fatalf("bob's credential after his refresh %+v", c)
	}
	if c, _ := s.Credential(admin, api.LoginCodex); c.Token != first {
		t.Fatalf("admin's credential changed with bob's refresh: %+v", c)
	}
	// The admin's refresh token is not the endpoint's valid one: refused, and only the
	// admin's login needs reconnecting.
	if err := s.RefreshChatGPT(context.Background(), admin, now); codeOf(err) != api.CodeLoginNeedsReconnect {
		t.Fatalf("admin's refresh: %v", err)
	}
	if l, _ := s.Get("bob", api.LoginCodex); l.Status != api.LoginOK {
		t.Fatalf("bob's login %+v", l)
	}
}
