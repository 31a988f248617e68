package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/harness"
	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/internal/harness/claudecode"
	"github.com/hiloop/hiloop/internal/harness/codex"
	"github.com/hiloop/hiloop/internal/harness/opencode"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/logins"
	"github.com/hiloop/hiloop/internal/modelroute"
	"github.com/hiloop/hiloop/internal/usage"
	"github.com/hiloop/hiloop/pkg/api"
)

// The model route: every sandbox's gateway serves it on the sandbox's loopback, and each
// harness start gets tokens for it in place of API keys (see internal/modelroute).

// tokenKeyPurpose derives the key that signs the route's tokens from the master key.
const tokenKeyPurpose = "model route tokens v1"

// providerLogin is the login each provider's credential comes from.
var providerLogin = map[modelroute.Provider]api.LoginProvider{
	modelroute.Anthropic: api.LoginClaude,
	modelroute.OpenAI:    api.LoginCodex,
	modelroute.ChatGPT:   api.LoginCodex,
}

// providerKeyEnv is the variable an API-key secret is attached as to stand for a provider's
// credential in one sandbox; it wins over the operator's login. ChatGPT has none: an
// OPENAI_API_KEY secret puts Codex in API-key mode at its start (harnessKeys).
var providerKeyEnv = map[modelroute.Provider]string{
	modelroute.Anthropic: "ANTHROPIC_API_KEY",
	modelroute.OpenAI:    "OPENAI_API_KEY",
}

// harnessProviders are the providers each harness's model requests go to, the keys it gets.
var harnessProviders = map[string][]modelroute.Provider{
	claudecode.Name: {modelroute.Anthropic},
	codex.Name:      {modelroute.OpenAI},
	opencode.Name:   {modelroute.Anthropic, modelroute.OpenAI},
}

// openModelRoute opens the usage store and makes the route's configuration; the gateway makes
// each sandbox's route from it.
func (d *Daemon) openModelRoute() error {
	var err error
	if d.usage, err = usage.Open(d.store.Owned("internal/usage"), usage.Config{Logger: d.log.With("component", "usage")}); err != nil {
		return err
	}
	tokens, err := modelroute.NewTokens(d.secrets.DeriveKey(tokenKeyPurpose))
	if err != nil {
		return err
	}
	upstream := map[modelroute.Provider]string{}
	for p := range modelroute.DefaultUpstream {
		if u := d.cfg.ProviderURLs[string(p)]; u != nil {
			upstream[p] = u.String()
		}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // the host's proxy variables are the operator's shell's, not the route's
	t.TLSClientConfig = &tls.Config{RootCAs: d.cfg.GatewayUpstreamCAs}
	t.ResponseHeaderTimeout = 10 * time.Minute // a model may think long before its first byte
	d.routeCfg = &modelroute.Config{
		Tokens:         tokens,
		Upstream:       upstream,
		Transport:      t,
		Credential:     d.routeCredential,
		Attribute:      d.routeAttribute,
		Budget:         d.usage.Check,
		BudgetSpent:    d.budgetSpent,
		Unreachable:    d.providerUnreachable,
		NoCredential:   d.noCredential,
		HarnessRefresh: d.harnessRefresh,
		Sink:           d.usage.Add,
		Log:            d.log.With("component", "model-route"),
	}
	return nil
}

// modelRoute is the gateway's ModelRoute: the route of one sandbox.
func (d *Daemon) modelRoute(sandboxID string) (gateway.ModelRoute, error) {
	return modelroute.New(sandboxID, d.routeCfg)
}

// routeCredential is the credential for provider p in the sandbox: an API-key secret attached
// to the sandbox as the provider's key variable wins, else the login of the sandbox's owner
// (whoever started the harness: the owner's login is the sandbox's). A ChatGPT login is the
// ChatGPT route's credential only, and that route has no other.
func (d *Daemon) routeCredential(_ context.Context, sandboxID string, p modelroute.Provider) (modelroute.Credential, error) {
	if key, err := d.keySecret(sandboxID, p); err != nil || key != "" {
		return modelroute.Credential{APIKey: key}, err
	}
	owner, err := d.sandboxOwner(sandboxID)
	if err != nil {
		return modelroute.Credential{}, err
	}
	login := providerLogin[p]
	c, err := d.logins.Credential(owner, login)
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Code == api.CodeLoginNotFound {
		return modelroute.Credential{}, fmt.Errorf("%w: add one with `hiloop login add %s`, or attach a secret as %s", modelroute.ErrNoCredential, login, providerKeyEnv[p])
	}
	if errors.As(err, &apiErr) && apiErr.Code == api.CodeLoginNeedsReconnect {
		return modelroute.Credential{}, fmt.Errorf("%w: %s", modelroute.ErrNoCredential, apiErr.Message)
	}
	if err != nil {
		return modelroute.Credential{}, err
	}
	switch {
	case p == modelroute.ChatGPT && c.Kind != api.LoginChatGPT:
		return modelroute.Credential{}, fmt.Errorf("%w: the %s login is no longer a ChatGPT login; start the harness again (stop and start the sandbox) for it to use the login there is now", modelroute.ErrNoCredential, login)
	case p != modelroute.ChatGPT && c.Kind == api.LoginChatGPT:
		return modelroute.Credential{}, fmt.Errorf("%w: the %s login is a ChatGPT plan, which serves Codex alone (in ChatGPT mode), not %s API requests; attach an API key as %s or add one with `hiloop login add %s --api-key-stdin`", modelroute.ErrNoCredential, login, p, providerKeyEnv[p], login)
	}
	return loginCredential(c), nil
}

// keySecret is the value of the API-key secret attached to the sandbox as p's key variable,
// "" when there is none.
func (d *Daemon) keySecret(sandboxID string, p modelroute.Provider) (string, error) {
	env := providerKeyEnv[p]
	if env == "" {
		return "", nil
	}
	atts, err := d.secrets.Attachments(sandboxID)
	if err != nil {
		return "", err
	}
	for _, a := range atts {
		if a.Env == env {
			if v := d.secrets.Value(sandboxID, a.Secret, a.Placeholder); len(v) > 0 {
				return string(v), nil
			}
		}
	}
	return "", nil
}

// loginCredential is what the route sends upstream for a login: a ChatGPT login's access token
// with its account, as Codex sends them to chatgpt.com.
func loginCredential(c logins.Credential) modelroute.Credential {
	switch c.Kind {
	case api.LoginAPIKey:
		return modelroute.Credential{APIKey: c.Token}
	case api.LoginChatGPT:
		out := modelroute.Credential{OAuthToken: c.Token, PlanType: c.PlanType}
		if c.AccountID != "" {
			out.Header = http.Header{"Chatgpt-Account-Id": {c.AccountID}}
		}
		return out
	}
	return modelroute.Credential{OAuthToken: c.Token}
}

// harnessRefresh records in the audit log a harness's own refresh of its placeholder ChatGPT
// login, which the route answered itself (refused "") or refused.
func (d *Daemon) harnessRefresh(sandboxID, refused string) {
	owner, _ := d.sandboxOwner(sandboxID) // "" for a sandbox gone meanwhile
	rec := api.AuditRecord{Action: api.AuditHarnessRefreshAnswered, Provider: api.LoginCodex, Kind: api.LoginChatGPT, Owner: owner,
		Sandbox: d.sandboxName(sandboxID), Harness: codex.Name, Message: "answered by the model route with the placeholders"}
	if refused != "" {
		rec.Message = "refused: " + refused
	}
	d.auditAdd(rec)
}

// routeAttribute maps the harness session a request names (or the one it was spawned from) to
// the hiloop session.
func (d *Daemon) routeAttribute(sandboxID string, _ modelroute.Provider, h modelroute.HarnessSession) string {
	sessions := d.liveSessions.Load()
	if sessions == nil {
		return ""
	}
	if h.ID != "" {
		if id := sessions.HarnessSession(sandboxID, h.ID); id != "" {
			return id
		}
	}
	if h.Parent != "" {
		return sessions.HarnessSession(sandboxID, h.Parent)
	}
	return ""
}

// budgetSpent tells the session whose request was refused which budget is spent, and how to
// raise it.
func (d *Daemon) budgetSpent(sandboxID, sessionID string, e usage.Exceeded) {
	d.log.Info("model route: a token budget is spent", "sandbox_id", sandboxID, "session", sessionID,
		"scope", e.Scope, "used", e.Used, "limit", e.Limit)
	msg := func(ses string) string {
		if e.Scope == usage.ScopeSession {
			return fmt.Sprintf("this session's model token budget is spent: %d of %d tokens used; the model route refuses its requests until you raise it with `hiloop session budget %s --tokens N`",
				e.Used, e.Limit, ses)
		}
		return fmt.Sprintf("the sandbox's model token budget is spent: %d of %d tokens used; the model route refuses its sessions' requests until you raise it with `hiloop sandbox budget %s --tokens N`",
			e.Used, e.Limit, d.sessionSandbox(ses))
	}
	// A request that names no session is refused only by the sandbox's budget: every turn
	// running in the sandbox is told.
	sessions := d.liveSessions.Load()
	switch {
	case sessions == nil:
	case sessionID == "":
		sessions.InSandbox(sandboxID, func(ses string) { sessions.BudgetSpent(ses, msg(ses)) })
	default:
		sessions.BudgetSpent(sessionID, msg(sessionID))
	}
}

// providerUnreachable tells the session whose request could not reach its provider, once a
// turn: the harness retries quietly, so without it the user sees nothing for minutes.
func (d *Daemon) providerUnreachable(sandboxID, sessionID string, p modelroute.Provider, err error) {
	d.log.Warn("model route: the provider is unreachable", "sandbox_id", sandboxID, "session", sessionID, "provider", p, "err", err)
	d.routeFailed(sandboxID, sessionID, func(ses string) string {
		return fmt.Sprintf("the %s API could not be reached through the model route (%v); the harness retries on its own, and `hiloop session cancel %s` stops it", p, err, ses)
	})
}

// noCredential tells the session whose request the route refused for want of a usable login,
// once a turn: a harness may retry a 401 quietly.
func (d *Daemon) noCredential(sandboxID, sessionID string, p modelroute.Provider, err error) {
	d.routeFailed(sandboxID, sessionID, func(string) string {
		return fmt.Sprintf("the model route refused the %s request: %v", p, err)
	})
}

// routeFailed gives the session the notice msg makes for it, or, for a request that names no
// session, every session with a turn running in the sandbox.
func (d *Daemon) routeFailed(sandboxID, sessionID string, msg func(session string) string) {
	sessions := d.liveSessions.Load()
	switch {
	case sessions == nil:
	case sessionID == "":
		sessions.InSandbox(sandboxID, func(ses string) { sessions.RouteFailed(ses, msg(ses)) })
	default:
		sessions.RouteFailed(sessionID, msg(sessionID))
	}
}

// sandboxOwner is the user who owns the sandbox with the given id: whose logins its harnesses
// use.
func (d *Daemon) sandboxOwner(id string) (string, error) {
	boxes, err := d.store.ListSandboxes()
	if err != nil {
		return "", err
	}
	for _, b := range boxes {
		if b.ID == id {
			owner, _ := identity.Split(b.Name)
			return owner, nil
		}
	}
	return "", api.Errorf(api.CodeSandboxNotFound, "no sandbox has the id %q", id)
}

// sandboxName is the name of the sandbox with the given id, for the audit log; the id when
// the store does not know it.
func (d *Daemon) sandboxName(id string) string {
	if boxes, err := d.store.ListSandboxes(); err == nil {
		for _, b := range boxes {
			if b.ID == id {
				return b.Name
			}
		}
	}
	return id
}

// sessionSandbox is the name of the session's sandbox, for a command in a notice.
func (d *Daemon) sessionSandbox(sessionID string) string {
	if rec, err := d.store.GetSession(sessionID); err == nil {
		return rec.Sandbox
	}
	return "SANDBOX"
}

// harnessKeys mints the route tokens of one harness start; release revokes them. The logins
// are those of the sandbox's owner, whoever starts the harness, and the audit log records
// whose each start used. Codex whose OpenAI credential is a ChatGPT login
// (no OPENAI_API_KEY secret attached) gets a placeholder ChatGPT login instead of an OpenAI
// key: it runs in ChatGPT mode against the route.
func (d *Daemon) harnessKeys(sandboxID, sandbox, name string) (harness.Keys, func(), error) {
	providers := harnessProviders[name]
	if len(providers) == 0 {
		return harness.Keys{}, func() {}, nil
	}
	owner, err := d.sandboxOwner(sandboxID)
	if err != nil {
		return harness.Keys{}, nil, err
	}
	start, err := d.routeCfg.Tokens.Mint(sandboxID)
	if err != nil {
		return harness.Keys{}, nil, err
	}
	var keys harness.Keys
	for _, p := range providers {
		l, lerr := d.logins.Get(owner, providerLogin[p])
		if lerr == nil {
			d.freshen(l)
			d.auditAdd(api.AuditRecord{Action: api.AuditHarnessLoginUsed, Provider: l.Provider, Kind: l.Kind, Owner: owner, Sandbox: sandbox, Harness: name})
		}
		if p == modelroute.OpenAI && name == codex.Name && lerr == nil && l.Kind == api.LoginChatGPT {
			if key, err := d.keySecret(sandboxID, p); err == nil && key == "" {
				if keys.ChatGPT, err = d.chatGPTPlaceholders(start, owner); err != nil {
					d.routeCfg.Tokens.Revoke(start.ID)
					return harness.Keys{}, nil, err
				}
				continue
			}
		}
		tok, err := d.routeCfg.Tokens.Token(start, p)
		if err != nil {
			d.routeCfg.Tokens.Revoke(start.ID)
			return harness.Keys{}, nil, err
		}
		switch p {
		case modelroute.Anthropic:
			keys.Anthropic = tok
		case modelroute.OpenAI:
			keys.OpenAI = tok
		}
	}
	return keys, func() { d.routeCfg.Tokens.Revoke(start.ID) }, nil
}

// chatGPTPlaceholders is the placeholder ChatGPT login of a harness start, on the plan of the
// codex login of owner, the sandbox's owner.
func (d *Daemon) chatGPTPlaceholders(start modelroute.Start, owner string) (*adapter.ChatGPTLogin, error) {
	var plan string
	if c, err := d.logins.Credential(owner, api.LoginCodex); err == nil {
		plan = c.PlanType
	}
	t, err := d.routeCfg.Tokens.ChatGPTPlaceholders(start, plan)
	if err != nil {
		return nil, err
	}
	return &adapter.ChatGPTLogin{IDToken: t.IDToken, AccessToken: t.AccessToken, RefreshToken: t.RefreshToken, AccountID: t.AccountID}, nil
}

// usageDeleted drops the usage of a deleted sandbox.
func (d *Daemon) usageDeleted(name, id string) {
	d.routeCfg.Tokens.RevokeSandbox(id)
	if err := d.usage.DeleteSandbox(id); err != nil {
		d.log.Error("delete the model usage of a deleted sandbox; the next start of sandboxd finishes it", "sandbox", name, "err", err)
	}
}

// pruneUsage drops the usage of sandboxes and sessions deleted while no daemon was told.
func (d *Daemon) pruneUsage() error {
	boxes, err := d.store.ListSandboxes()
	if err != nil {
		return err
	}
	ids := map[string]bool{}
	for _, b := range boxes {
		ids[b.ID] = true
	}
	sessions, err := d.store.ListSessions()
	if err != nil {
		return err
	}
	seen := map[[2]string]bool{}
	for _, s := range sessions {
		seen[[2]string{s.SandboxID, s.ID}] = true
	}
	return d.usage.Prune(func(id string) bool { return ids[id] },
		func(sb, ses string) bool { return seen[[2]string{sb, ses}] })
}

// freshen renews a ChatGPT login that a harness start is about to use when its access token
// expires within logins.RenewBefore: however many harnesses start at once, the login makes at
// most one refresh a minute (logins.Store.RefreshChatGPT), and a failure is the audit log's
// and the next use's to report, not this start's.
func (d *Daemon) freshen(l api.Login) {
	if l.Kind != api.LoginChatGPT || l.Status != api.LoginOK || l.ExpiresAt == nil || time.Until(*l.ExpiresAt) > logins.RenewBefore {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.logins.RefreshChatGPT(ctx, l.Owner, time.Now()); err != nil {
		d.log.Warn("renew the chatgpt login for a harness start", "err", err)
	}
}
