package daemon

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/auditlog"
	"github.com/hiloop/hiloop/internal/fakeprovider"
	"github.com/hiloop/hiloop/internal/harness/claudecode"
	"github.com/hiloop/hiloop/internal/harness/codex"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/logins"
	"github.com/hiloop/hiloop/internal/modelroute"
	"github.com/hiloop/hiloop/internal/secrets"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// Twenty harnesses starting at once with a ChatGPT login about to expire renew it with one
// request to the token endpoint, and each start gets tokens of its own.
func TestHarnessStartsRefreshAChatGPTLoginOnce(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{RefreshToken: "rt-0", AccessTokenTTL: 30 * time.Minute})
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	defer fake.Close()

	d := newLoginDaemon(t)
	d.logins.Refresh = &logins.Refresher{TokenURL: fake.URL() + "/oauth/token"}

	// An auth.json whose access token expires in 20 minutes: inside logins.RenewBefore.
	access := logins.UnsignedJWT(map[string]any{"exp": float64(time.Now().Add(20 * time.Minute).Unix())})
	auth, _ := json.Marshal(map[string]any{"tokens": map[string]string{"id_token": access, "access_token": access, "refresh_token": "rt-0"}})
	if _, err := d.logins.Put(identity.LocalAdmin, api.LoginCodex, api.LoginPut{Kind: api.LoginChatGPT, Value: string(auth)}, time.Now()); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	keys := make([]string, 20)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, release, err := d.harnessKeys("sandbox-id", "box", codex.Name)
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			if k.OpenAI != "" || k.ChatGPT == nil {
				t.Errorf("a codex start with a ChatGPT login got %+v, want a placeholder login", k)
				return
			}
			keys[i] = k.ChatGPT.AccessToken
		}()
	}
	wg.Wait()
	if n := fake.TokenCalls(); n != 1 {
		t.Fatalf("the token endpoint was called %d times by 20 harness starts, want 1", n)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, "eyJ") || seen[k] {
			t.Fatalf("harness start keys %q", keys)
		}
		seen[k] = true
	}
	l, err := d.logins.Get(identity.LocalAdmin, api.LoginCodex)
	if err != nil || l.RefreshedAt == nil || time.Until(*l.ExpiresAt) < 25*time.Minute {
		t.Fatalf("the login after the starts: %+v %v", l, err)
	}
	recs, err := d.audit.Since(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var used, refreshed int
	for _, r := range recs {
		switch r.Action {
		case api.AuditHarnessLoginUsed:
			used++
		case api.AuditLoginRefreshed:
			refreshed++
		}
	}
	if used != 20 || refreshed != 1 {
		t.Fatalf("audit: %d harness starts using the login, %d refreshes; want 20 and 1", used, refreshed)
	}
}

// A sandbox's harnesses use the logins of its owner, whoever starts them: bob's sandbox gets
// bob's login, the admin's sandbox the admin's, and the audit log says whose each start used.
// A user without a login of the provider gets none of another user's.
func TestHarnessUsesTheSandboxOwnersLogin(t *testing.T) {
	d := newLoginDaemon(t)
	got := make(chan string, 4)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-Api-Key")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"m","usage":{"input_tokens":3,"output_tokens":4}}`)
	}))
	defer upstream.Close()
	cfg := *d.routeCfg
	cfg.Upstream = map[modelroute.Provider]string{modelroute.Anthropic: upstream.URL}
	cfg.Transport = &http.Transport{}
	cfg.Credential = d.routeCredential
	send := func(sandboxID, tok string) (int, string) {
		t.Helper()
		rt, err := modelroute.New(sandboxID, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/anthropic/v1/messages", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("X-Api-Key", tok)
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			return w.Code, w.Body.String()
		}
		return w.Code, <-got
	}
	start := func(sandboxID, sandbox string) string {
		t.Helper()
		k, release, err := d.harnessKeys(sandboxID, sandbox, claudecode.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		return k.Anthropic
	}

	// bob has no claude login yet: the admin's is not his to use.
	if _, err := d.logins.Put(identity.LocalAdmin, api.LoginClaude, api.LoginPut{Kind: api.LoginAPIKey, Value: "sk-ant-ADMIN"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	bobTok := start("bob-id", "bob.box")
	if code, body := send("bob-id", bobTok); code != http.StatusUnauthorized || !strings.Contains(body, "hiloop login add claude") {
		t.Errorf("bob's sandbox without a login of bob's: %d %s, want 401 saying to add one", code, body)
	}
	if _, err := d.logins.Put("bob", api.LoginClaude, api.LoginPut{Kind: api.LoginAPIKey, Value: "sk-ant-BOB"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, key := send("bob-id", bobTok); key != "sk-ant-BOB" {
		t.Errorf("bob's sandbox sent %d %q upstream, want bob's key", code, key)
	}
	if code, key := send("sandbox-id", start("sandbox-id", "box")); key != "sk-ant-ADMIN" {
		t.Errorf("the admin's sandbox sent %d %q upstream, want the admin's key", code, key)
	}
	recs, err := d.audit.Since(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, r := range recs {
		if r.Action == api.AuditHarnessLoginUsed {
			used = append(used, r.Sandbox+":"+r.Owner)
		}
	}
	// bob's first start found no login of his: nothing used, nothing recorded.
	if strings.Join(used, " ") != "box:admin" {
		t.Errorf("harness starts recorded with their logins' owners: %q", used)
	}
	start("bob-id", "bob.box")
	recs, _ = d.audit.Since(0, 0)
	if last := recs[len(recs)-1]; last.Action != api.AuditHarnessLoginUsed || last.Owner != "bob" || last.Sandbox != "bob.box" {
		t.Errorf("bob's start with his login recorded as %+v", last)
	}
}

// newLoginDaemon is a daemon with what its logins and model route tokens need: secrets, the
// audit log, logins and the route's token keys.
func newLoginDaemon(t *testing.T) *Daemon {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sec, err := secrets.Open(st.Owned("internal/secrets"), filepath.Join(dir, "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{log: slog.New(slog.NewTextHandler(io.Discard, nil)), secrets: sec, store: st}
	// The sandboxes the tests start harnesses in: the local admin's and bob's.
	for name, id := range map[string]string{"box": "sandbox-id", "other": "other-id", "bob.box": "bob-id"} {
		if err := st.CreateSandbox(store.Sandbox{ID: id, Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if d.audit, err = auditlog.Open(st.Owned("internal/auditlog")); err != nil {
		t.Fatal(err)
	}
	if d.logins, err = logins.Open(st.Owned("internal/logins"), sec); err != nil {
		t.Fatal(err)
	}
	d.logins.Audit = d.auditAdd
	tokens, err := modelroute.NewTokens(sec.DeriveKey(tokenKeyPurpose))
	if err != nil {
		t.Fatal(err)
	}
	d.routeCfg = &modelroute.Config{Tokens: tokens}
	return d
}

// Which route Codex uses follows the codex login's kind at its start: a ChatGPT login gives it
// a placeholder login for the ChatGPT route, whose requests reach the backend with the login's
// access token and account; an API key (or an OPENAI_API_KEY secret attached, which wins) gives
// it a route token for the OpenAI API. Each route refuses the other's login.
func TestRouteFollowsTheLoginKind(t *testing.T) {
	d := newLoginDaemon(t)
	asked := make(chan string, 4) // which upstream, the path and the credential it got
	serve := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked <- name + " " + r.URL.Path + " " + r.Header.Get("Authorization") + " " + r.Header.Get("Chatgpt-Account-Id")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"model":"m","usage":{"input_tokens":3,"output_tokens":4}}`)
		}))
		t.Cleanup(s.Close)
		return s
	}
	apiSrv, backend := serve("api"), serve("chatgpt")
	cfg := *d.routeCfg
	cfg.Upstream = map[modelroute.Provider]string{modelroute.OpenAI: apiSrv.URL, modelroute.ChatGPT: backend.URL}
	cfg.Transport = &http.Transport{}
	cfg.Credential = d.routeCredential
	rt, err := modelroute.New("sandbox-id", &cfg)
	if err != nil {
		t.Fatal(err)
	}
	send := func(path, tok string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Chatgpt-Account-Id", modelroute.PlaceholderAccountID)
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			return w.Code, w.Body.String()
		}
		return w.Code, <-asked
	}

	access := logins.UnsignedJWT(map[string]any{"exp": float64(time.Now().Add(3 * time.Hour).Unix())})
	id := logins.UnsignedJWT(map[string]any{"https://api.openai.com/auth": map[string]any{"chatgpt_plan_type": "plus"}})
	auth, _ := json.Marshal(map[string]any{"tokens": map[string]string{"id_token": id, "access_token": access, "refresh_token": "rt-0", "account_id": "acct-1"}})
	if _, err := d.logins.Put(identity.LocalAdmin, api.LoginCodex, api.LoginPut{Kind: api.LoginChatGPT, Value: string(auth)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	keys, release, err := d.harnessKeys("sandbox-id", "box", codex.Name)
	if err != nil || keys.ChatGPT == nil || keys.OpenAI != "" {
		t.Fatalf("codex start with a ChatGPT login: %+v %v", keys, err)
	}
	defer release()
	claims, _ := base64.RawURLEncoding.DecodeString(strings.Split(keys.ChatGPT.IDToken, ".")[1])
	if !strings.Contains(string(claims), `"chatgpt_plan_type":"plus"`) || strings.Contains(string(claims), "acct-1") {
		t.Errorf("placeholder id token claims %s: want the plan, not the account", claims)
	}
	if code, got := send("/chatgpt/backend-api/codex/responses", keys.ChatGPT.AccessToken); got != "chatgpt /backend-api/codex/responses Bearer "+access+" acct-1" {
		t.Errorf("ChatGPT route with a ChatGPT login: %d %s", code, got)
	}
	// An OPENAI_API_KEY secret attached to another sandbox wins there: API-key mode.
	sp := api.SecretsPost{Name: "openai", Hosts: []string{"api.openai.com"}, Header: "authorization", Value: "sk-proj-SECRET"}
	if err := sp.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.secrets.Create(identity.LocalAdmin, sp, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := d.secrets.Attach("other-id", "other", []api.SecretAttachment{{Secret: "openai", Env: "OPENAI_API_KEY"}}); err != nil {
		t.Fatal(err)
	}
	if k, release, err := d.harnessKeys("other-id", "other", codex.Name); err != nil || k.ChatGPT != nil || !strings.HasPrefix(k.OpenAI, "sk-proj-hiloop-") {
		t.Errorf("codex start with a key secret attached: %+v %v, want API-key mode", k, err)
	} else {
		release()
	}
	start, _ := cfg.Tokens.Mint("sandbox-id")
	openai, _ := cfg.Tokens.Token(start, modelroute.OpenAI)
	if code, got := send("/openai/v1/responses", openai); code != http.StatusUnauthorized || !strings.Contains(got, "serves Codex alone") {
		t.Errorf("OpenAI route with a ChatGPT login: %d %s, want 401 saying why", code, got)
	}

	if _, err := d.logins.Put(identity.LocalAdmin, api.LoginCodex, api.LoginPut{Kind: api.LoginAPIKey, Value: "sk-proj-REAL"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, got := send("/openai/v1/responses", openai); got != "api /v1/responses Bearer sk-proj-REAL " {
		t.Errorf("with an API key login: %d %q", code, got)
	}
	if code, got := send("/chatgpt/backend-api/codex/responses", keys.ChatGPT.AccessToken); code != http.StatusUnauthorized || !strings.Contains(got, "no longer a ChatGPT login") {
		t.Errorf("ChatGPT route with an API key login: %d %s, want 401 saying why", code, got)
	}
	if keys, release, err := d.harnessKeys("sandbox-id", "box", codex.Name); err != nil || keys.ChatGPT != nil || !strings.HasPrefix(keys.OpenAI, "sk-proj-hiloop-") {
		t.Errorf("codex start with an API key login: %+v %v", keys, err)
	} else {
		release()
	}
}
