// Package modelroute is the model route: the part of a sandbox's gateway that forwards its
// harnesses' model requests to Anthropic and OpenAI, and Codex's to the ChatGPT backend when
// the operator's login is a ChatGPT plan. A harness sees the route as its provider's base URL
// on the sandbox's own loopback (http://127.0.0.1:3128/anthropic, .../openai/v1,
// .../chatgpt/backend-api/codex) and an audience-scoped token as its API key (for ChatGPT, as
// the access token of a placeholder login: chatgpt.go). For each request the route checks the token against the
// sandbox and provider it arrived for, asks whether a token budget is spent, replaces the token
// with the operator's credential, forwards to the provider with TLS verification, and streams the
// answer back unchanged while reading the tokens it reports.
//
// It owns the tokens (token.go), the forwarding (this file), the ChatGPT placeholders and the
// token endpoint it answers itself (chatgpt.go), the metering (meter.go) and the errors it
// answers in each provider's format (errors.go). It keeps no state of its own on disk
// and must not touch the store, sessions or the gateway's connections: what it needs from the
// daemon (credentials, budgets, attribution, where records go) comes through Config's callbacks,
// and the gateway hands it the requests (see Handles).
package modelroute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hiloop/hiloop/internal/usage"
)

// Provider is a model provider the route forwards to; its route is /<provider>/ on the
// gateway's listener.
type Provider string

// The providers. ChatGPT is the ChatGPT backend that Codex logged in with a ChatGPT plan
// talks to; its requests are OpenAI Responses requests in all that the route reads.
const (
	Anthropic Provider = "anthropic"
	OpenAI    Provider = "openai"
	ChatGPT   Provider = "chatgpt"
)

// DefaultUpstream is each provider's API, where the route forwards unless Config.Upstream says
// otherwise (sandboxd --provider-url). The path after the provider's prefix is kept:
// /openai/v1/responses goes to https://api.openai.com/v1/responses,
// /chatgpt/backend-api/codex/responses to https://chatgpt.com/backend-api/codex/responses.
var DefaultUpstream = map[Provider]string{
	Anthropic: "https://api.anthropic.com",
	OpenAI:    "https://api.openai.com",
	ChatGPT:   "https://chatgpt.com",
}

// Handles reports whether a request path is for the model route (/anthropic/…, /openai/…,
// /chatgpt/…):
// the gateway hands such origin-form requests to the sandbox's Route.
func Handles(path string) bool {
	_, _, ok := split(path)
	return ok
}

// split cuts a request path into its provider and the upstream path after the prefix.
func split(path string) (Provider, string, bool) {
	for p := range DefaultUpstream {
		if rest, ok := strings.CutPrefix(path, "/"+string(p)); ok && strings.HasPrefix(rest, "/") {
			return p, rest, true
		}
	}
	return "", "", false
}

// Credential is the operator's credential for a provider, as the daemon's Credential callback
// gives it; it replaces the token on the way upstream.
type Credential struct {
	// APIKey is an API key: Anthropic's goes in x-api-key, OpenAI's in Authorization: Bearer.
	APIKey string
	// OAuthToken, used when APIKey is "", is an OAuth access token, sent as Authorization:
	// Bearer. For Anthropic (the token of `claude setup-token`) the route adds the beta the API
	// requires of OAuth tokens, anthropic-beta: oauth-2025-04-20, as Claude Code's own client
	// does (read in @anthropic-ai/claude-agent-sdk 0.3.318's bundled client).
	OAuthToken string
	// Header is set on the upstream request as well (for a ChatGPT login, chatgpt-account-id).
	Header http.Header
	// PlanType is a ChatGPT login's plan (its id token's chatgpt_plan_type), which the
	// placeholder id token the sandbox sees carries; "" when unknown.
	PlanType string
}

// AnthropicOAuthBeta is the anthropic-beta value the Anthropic API requires with an OAuth token.
const AnthropicOAuthBeta = "oauth-2025-04-20"

// ErrNoCredential is what a Credential callback returns (wrapped) when the operator has no
// login or key for the provider; the harness then gets a 401 saying so.
var ErrNoCredential = errors.New("no credential for this provider")

// HarnessSession is what a request says about the harness conversation it belongs to, read from
// the headers harnesses send (see sessionHeaders): the daemon maps it to a hiloop session.
type HarnessSession struct {
	ID     string // the harness's own session id; for the three harnesses, their ACP session id
	Parent string // the session a sub-agent's session was spawned from, when the harness says
}

// Config is what every sandbox's route shares; the daemon makes one. Set the fields before the
// first request and leave them alone after. The callbacks run on the goroutine serving the
// request, before it is forwarded (all but Sink) or after its response ended (Sink): they must
// be quick and must not block.
type Config struct {
	// Tokens checks the tokens requests present. Required.
	Tokens *Tokens
	// Upstream overrides DefaultUpstream per provider (a base URL, its path kept: a request
	// for /openai/v1/responses goes to {base}/v1/responses). http:// is accepted only for a
	// loopback address (a test's fake provider): a credential never crosses a network in clear.
	Upstream map[Provider]string
	// Transport carries requests upstream. Required; it must verify TLS certificates (an
	// *http.Transport with InsecureSkipVerify is refused). The route asks for identity encoding
	// so that it can read usage from the bytes it passes on.
	Transport http.RoundTripper
	// Credential returns the operator's credential for the sandbox and provider, asked for each
	// request so that a rotation applies at once. Required.
	Credential func(ctx context.Context, sandboxID string, p Provider) (Credential, error)
	// Attribute maps the harness session a request names to a hiloop session id; "" leaves the
	// request counted against the sandbox only. nil: every request is unattributed.
	Attribute func(sandboxID string, p Provider, h HarnessSession) string
	// Budget reports the first budget found spent for the sandbox, or for the session when it
	// is not "" (usage.Store.Check). nil: no budgets.
	Budget func(sandboxID, sessionID string) (*usage.Exceeded, error)
	// BudgetSpent is told of every request refused because a budget is spent, so that the
	// daemon can put a notice in the session's log. nil: none.
	BudgetSpent func(sandboxID, sessionID string, e usage.Exceeded)
	// Unreachable is told of every request the route could not carry to the provider (it
	// answered 502 or 504), so that the daemon can tell the session: a harness retries such
	// answers quietly, for minutes. nil: none.
	Unreachable func(sandboxID, sessionID string, p Provider, err error)
	// NoCredential is told of every request refused because the operator has no usable
	// credential for the provider (no login, or one that needs reconnecting: err says which),
	// for the same reason: Claude Code retries a 401 without end. nil: none.
	NoCredential func(sandboxID, sessionID string, p Provider, err error)
	// Sink receives a record of every request whose token was valid, once its response has
	// ended (usage.Store.Add). It runs before the handler returns, that is before the last
	// chunk of the response reaches the sandbox: it must not block. nil: discarded.
	Sink func(usage.Record)
	// HarnessRefresh is told of every refresh a harness asked of the route's ChatGPT token
	// endpoint, answered with placeholders (refused "") or refused (refused says why), for the
	// audit log. nil: none.
	HarnessRefresh func(sandboxID, refused string)
	// Log receives what goes wrong that no answer carries. nil: discarded.
	Log *slog.Logger
}

// Route is one sandbox's model route, an http.Handler for the requests Handles accepts.
type Route struct {
	sandbox  string
	cfg      *Config
	upstream map[Provider]*url.URL
	proxy    *httputil.ReverseProxy
	log      *slog.Logger
}

// New returns the model route of the sandbox with the given id (the id its tokens carry).
func New(sandboxID string, cfg *Config) (*Route, error) {
	switch {
	case sandboxID == "":
		return nil, errors.New("model route: no sandbox id")
	case cfg.Tokens == nil || cfg.Transport == nil || cfg.Credential == nil:
		return nil, errors.New("model route: Tokens, Transport and Credential are required")
	}
	if t, ok := cfg.Transport.(*http.Transport); ok && t.TLSClientConfig != nil && t.TLSClientConfig.InsecureSkipVerify {
		return nil, errors.New("model route: the transport does not verify TLS certificates")
	}
	rt := &Route{sandbox: sandboxID, cfg: cfg, upstream: map[Provider]*url.URL{}, log: cfg.Log}
	if rt.log == nil {
		rt.log = slog.New(slog.DiscardHandler)
	}
	for p, def := range DefaultUpstream {
		raw := def
		if u := cfg.Upstream[p]; u != "" {
			raw = u
		}
		u, err := ParseUpstream(raw)
		if err != nil {
			return nil, fmt.Errorf("model route: %s upstream %q: %w", p, raw, err)
		}
		rt.upstream[p] = u
	}
	for p := range cfg.Upstream {
		if _, ok := DefaultUpstream[p]; !ok {
			return nil, fmt.Errorf("model route: unknown provider %q", p)
		}
	}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite:        rt.rewrite,
		Transport:      cfg.Transport,
		FlushInterval:  -1, // a flush after every write, which streamWriter skips while more is ready
		ModifyResponse: rt.response,
		ErrorHandler:   rt.upstreamError,
		ErrorLog:       log.New(io.Discard, "", 0),
		BufferPool:     copyBuffers,
	}
	return rt, nil
}

// copyBuffers are the buffers responses are copied through. A read returns what has arrived,
// so a large buffer holds nothing back; it only saves system calls when a lot has arrived.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any { return make([]byte, 64<<10) }}}

type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte { return b.pool.Get().([]byte) }

//lint:ignore SA6002 a slice header is small next to the 64 KiB it points at
func (b *bufferPool) Put(p []byte) { b.pool.Put(p) }

// ParseUpstream checks a provider's URL and returns it without a trailing '/': https, or
// http to a loopback address (a credential never crosses a network in clear); a host, and a
// port from 1 to 65535 if one is written ("host:" with nothing after the colon would be read as
// the scheme's port); no user, query or fragment. sandboxd checks its --provider-url flags with
// it at start.
func ParseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Opaque != "" {
		return nil, errors.New("want an http or https URL, e.g. https://api.anthropic.com")
	}
	var problems []string
	if u.Hostname() == "" {
		problems = append(problems, "no host: want an http or https URL, e.g. https://api.anthropic.com")
	}
	if port, colon := u.Port(), strings.HasSuffix(u.Host, ":"); colon || port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); port == "" {
			problems = append(problems, "an empty port after ':': give one from 1 to 65535, or none for the scheme's")
		} else if err != nil || n == 0 {
			problems = append(problems, fmt.Sprintf("port %s: give one from 1 to 65535, or none for the scheme's", port))
		}
	}
	if u.User != nil {
		problems = append(problems, "a user or password in the URL: the daemon sends the provider's credential itself")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		problems = append(problems, "a query or fragment: want a base URL without them")
	}
	if u.Scheme == "http" && u.Hostname() != "" {
		host := u.Hostname()
		a, err := netip.ParseAddr(host)
		if host != "localhost" && (err != nil || !a.IsLoopback()) {
			problems = append(problems, "http:// only to a loopback address: use https")
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// exchange is one request in flight: what the forwarding steps hand each other.
type exchange struct {
	provider Provider
	target   *url.URL
	cred     Credential
	meter    *meter
	reqModel *requestModel
	upErr    error
	out      *streamWriter
	rec      usage.Record
}

type exchangeKey struct{}

// metered lists the endpoints whose responses report usage the route counts: those that make
// the model generate. Other requests (model lists, token counts, a stored response fetched
// again) are forwarded and recorded with no tokens.
var metered = map[Provider]map[string]bool{
	Anthropic: {"/v1/messages": true},
	OpenAI:    {"/v1/responses": true, "/v1/responses/compact": true, "/v1/chat/completions": true},
	ChatGPT:   {"/backend-api/codex/responses": true, "/backend-api/codex/responses/compact": true},
}

// allowed lists what a harness may ask of each provider through the route: generate, count
// tokens, list models. Anything else is refused: the operator's credential would open the
// account that every sandbox shares (its files, batches, stored responses and fine-tuning jobs),
// and the batch and background endpoints would generate tokens the meter never sees (a
// background response's result is fetched with a GET that is not allowed either). Of the
// ChatGPT backend, Codex's model requests and its model list (what the plan serves); the rest
// of what Codex 0.166 asks of it in ChatGPT mode (wham/accounts/check, wham/settings/user; with
// analytics and apps on, which the codex adapter turns off, analytics events and the apps' MCP
// server) reads the operator's account or sends it telemetry, and Codex works on without it
// (testdata/script/route_codex_chatgpt.txtar).
var allowed = map[Provider]map[string][]string{
	Anthropic: {
		http.MethodPost: {"/v1/messages", "/v1/messages/count_tokens"},
		http.MethodGet:  {"/v1/models", "/v1/models/*"},
	},
	OpenAI: {
		http.MethodPost: {"/v1/responses", "/v1/responses/compact", "/v1/chat/completions"},
		http.MethodGet:  {"/v1/models", "/v1/models/*"},
	},
	ChatGPT: {
		http.MethodPost: {"/backend-api/codex/responses", "/backend-api/codex/responses/compact"},
		http.MethodGet:  {"/backend-api/codex/models"},
	},
}

// endpointAllowed reports whether method and the path after the provider's prefix are in
// allowed; "/*" stands for one more segment.
func endpointAllowed(p Provider, method, rest string) bool {
	for _, pattern := range allowed[p][method] {
		if base, ok := strings.CutSuffix(pattern, "/*"); ok {
			if id, ok := strings.CutPrefix(rest, base+"/"); ok && id != "" && !strings.Contains(id, "/") {
				return true
			}
		} else if rest == pattern {
			return true
		}
	}
	return false
}

// ServeHTTP serves one request of the sandbox's harnesses.
func (rt *Route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	p, rest, ok := split(r.URL.Path)
	if !ok {
		writeError(w, p, &Error{Status: http.StatusNotFound, Code: CodeBadRequest,
			Message: "the model route serves /anthropic/…, /openai/… and /chatgpt/…, not " + r.URL.Path})
		return
	}
	if cleanPath(rest) != rest {
		writeError(w, p, &Error{Status: http.StatusBadRequest, Code: CodeBadRequest,
			Message: "the path must not contain . or .. segments or empty ones: " + r.URL.Path})
		return
	}
	if p == ChatGPT && rt.serveOAuth(w, r, rest) {
		return
	}
	if _, e := rt.verify(r, p); e != nil {
		writeError(w, p, e)
		return
	}
	if r.Header.Get("Upgrade") != "" {
		// A WebSocket (Codex's Responses over WebSocket) would carry usage the meter cannot
		// read. 426 is what Codex takes as "use HTTP": it falls back to a streamed POST.
		writeError(w, p, &Error{Status: http.StatusUpgradeRequired, Code: CodeBadRequest,
			Message: "the model route carries HTTP requests and streams, not WebSocket connections; use HTTP"})
		return
	}
	if !endpointAllowed(p, r.Method, rest) {
		writeError(w, p, &Error{Status: http.StatusForbidden, Code: CodeEndpointNotAllowed,
			Message: fmt.Sprintf("the model route carries generation, token counts and model lists, not %s %s", r.Method, r.URL.Path)})
		return
	}
	hs := harnessSession(r.Header)
	x := &exchange{provider: p, rec: usage.Record{Time: begin.UTC(), SandboxID: rt.sandbox,
		HarnessSession: hs.ID, Provider: string(p), Path: rest}}
	if rt.cfg.Attribute != nil {
		x.rec.SessionID = rt.cfg.Attribute(rt.sandbox, p, hs)
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		rt.finish(x, sw, r, begin, v)
		if v != nil {
			panic(v) // http.ErrAbortHandler: the server drops the connection quietly
		}
	}()

	if rt.cfg.Budget != nil {
		spent, err := rt.cfg.Budget(rt.sandbox, x.rec.SessionID)
		if err != nil {
			rt.log.Error("check the model budget", "sandbox", rt.sandbox, "err", err)
			x.rec.Err = "the budget could not be checked: " + err.Error()
			writeError(sw, p, &Error{Status: http.StatusServiceUnavailable, Code: CodeUpstream,
				Message: "hiloop could not check the model token budget; try again"})
			return
		}
		if spent != nil {
			e := budgetError(*spent)
			x.rec.Err = e.Message
			if rt.cfg.BudgetSpent != nil {
				rt.cfg.BudgetSpent(rt.sandbox, x.rec.SessionID, *spent)
			}
			writeError(sw, p, e)
			return
		}
	}

	cred, err := rt.cfg.Credential(r.Context(), rt.sandbox, p)
	if err == nil && cred.APIKey == "" && cred.OAuthToken == "" {
		err = ErrNoCredential
	}
	if err != nil {
		x.rec.Err = "credential: " + err.Error()
		e := &Error{Status: http.StatusUnauthorized, Code: CodeNoCredential,
			Message: fmt.Sprintf("hiloop has no %s login or API key for this sandbox: the operator adds one with `hiloop login add`", p)}
		if why, ok := strings.CutPrefix(err.Error(), ErrNoCredential.Error()+": "); ok {
			// The daemon's own words: which login to add, or why the one there cannot be used.
			e.Message = fmt.Sprintf("hiloop has no usable %s credential for this sandbox: %s", p, why)
		}
		if errors.Is(err, ErrNoCredential) && rt.cfg.NoCredential != nil {
			rt.cfg.NoCredential(rt.sandbox, x.rec.SessionID, p, err)
		}
		if !errors.Is(err, ErrNoCredential) {
			rt.log.Error("get the provider credential", "sandbox", rt.sandbox, "provider", p, "err", err)
			e = &Error{Status: http.StatusServiceUnavailable, Code: CodeUpstream,
				Message: fmt.Sprintf("hiloop could not read its %s credential; try again", p)}
		}
		writeError(sw, p, e)
		return
	}
	x.cred = cred

	base, prefix := rt.upstream[p], "/"+string(p)
	target := *base
	target.Path = base.Path + strings.TrimPrefix(r.URL.Path, prefix)
	target.RawPath = base.EscapedPath() + strings.TrimPrefix(r.URL.EscapedPath(), prefix)
	target.RawQuery = r.URL.RawQuery
	x.target = &target
	if r.ContentLength > 0 {
		// Once the route writes the response's headers, the server drains and closes the
		// request body; the transport, having sent the declared length, reads once more to
		// check for excess, and a read of the closed body makes it drop the upstream
		// connection, cutting the response mid-stream. Ending the body at its declared length
		// keeps that read off the closed body.
		r.Body = sizedBody{Reader: io.LimitReader(r.Body, r.ContentLength), Closer: r.Body}
	}
	if r.Method == http.MethodPost && metered[p][rest] && r.Body != nil && r.Body != http.NoBody {
		x.reqModel = &requestModel{}
		r.Body = &tappedBody{ReadCloser: r.Body, see: x.reqModel.write}
	}
	x.out = newStreamWriter(sw)
	defer x.out.stop()
	rt.proxy.ServeHTTP(x.out, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x)))
}

// verify finds the token where harnesses send keys (x-api-key, Authorization: Bearer) and
// checks it. Both headers may carry it, but not two different values.
func (rt *Route) verify(r *http.Request, p Provider) (Start, *Error) {
	token := r.Header.Get("X-Api-Key")
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, bearer, _ := strings.Cut(auth, " ")
		bearer = strings.TrimSpace(bearer)
		switch {
		case !strings.EqualFold(scheme, "Bearer") || bearer == "":
			return Start{}, &Error{Status: http.StatusUnauthorized, Code: CodeInvalidToken,
				Message: "the Authorization header must be Bearer <token>"}
		case token != "" && token != bearer:
			return Start{}, &Error{Status: http.StatusUnauthorized, Code: CodeInvalidToken,
				Message: "x-api-key and Authorization carry different keys"}
		}
		token = bearer
	}
	if token == "" {
		return Start{}, &Error{Status: http.StatusUnauthorized, Code: CodeInvalidToken,
			Message: "no API key: send the token the harness was given in x-api-key or Authorization: Bearer"}
	}
	return rt.cfg.Tokens.Verify(token, rt.sandbox, p)
}

// budgetError is the answer to a request whose budget is spent. Its message says whose budget
// it is, and that it is not the provider's limit; it avoids the words clients match to
// decide that an error is a provider's rate limit worth retrying.
func budgetError(e usage.Exceeded) *Error {
	whose := "this sandbox's"
	if e.Scope == usage.ScopeSession {
		whose = "session " + e.SessionID + "'s"
	}
	return &Error{Status: http.StatusTooManyRequests, Code: CodeBudgetExceeded,
		Message: fmt.Sprintf("hiloop budget spent: %s model token budget is used up (%d of %d tokens). "+
			"This is hiloop's budget, not a limit of the provider; the operator can raise it.", whose, e.Used, e.Limit)}
}

// credentialHeaders are removed from every request before it goes upstream: the token and
// anything else a sandbox could use to speak for an account (the operator's credential decides
// the account, organisation and project).
var credentialHeaders = []string{
	"Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key", "Cookie",
	"Openai-Organization", "Openai-Project", "Chatgpt-Account-Id", "X-Goog-Api-Key",
}

// rewrite makes the upstream request: the target URL, the credential in place of the token.
// httputil removes the hop-by-hop and X-Forwarded headers.
func (rt *Route) rewrite(pr *httputil.ProxyRequest) {
	x := pr.In.Context().Value(exchangeKey{}).(*exchange)
	out := pr.Out
	out.URL = x.target
	out.Host = ""
	for _, h := range credentialHeaders {
		out.Header.Del(h)
	}
	// Plain bytes, so that the meter can read them; the sandbox is on loopback anyway.
	out.Header.Set("Accept-Encoding", "identity")
	beta := dropBeta(out.Header.Values("Anthropic-Beta"), AnthropicOAuthBeta)
	out.Header.Del("Anthropic-Beta")
	c := x.cred
	switch {
	case c.APIKey != "" && x.provider == Anthropic:
		out.Header.Set("X-Api-Key", c.APIKey)
	case c.APIKey != "":
		out.Header.Set("Authorization", "Bearer "+c.APIKey)
	default:
		out.Header.Set("Authorization", "Bearer "+c.OAuthToken)
		if x.provider == Anthropic {
			beta = append(beta, AnthropicOAuthBeta)
		}
	}
	if len(beta) > 0 {
		out.Header.Set("Anthropic-Beta", strings.Join(beta, ","))
	}
	for k, vs := range c.Header {
		out.Header[http.CanonicalHeaderKey(k)] = vs
	}
}

// dropBeta returns the anthropic-beta flags in values other than drop (which the route adds
// itself when the credential calls for it).
func dropBeta(values []string, drop string) []string {
	var out []string
	for _, v := range values {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" && f != drop {
				out = append(out, f)
			}
		}
	}
	return out
}

// response puts the meter on a response that can report usage.
func (rt *Route) response(resp *http.Response) error {
	// A provider's cookies are for the operator's account, not for a sandbox.
	resp.Header.Del("Set-Cookie")
	x := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	resp.Body = x.out.body(resp.Body)
	if x.reqModel == nil { // not a metered endpoint
		return nil
	}
	switch resp.Header.Get("Content-Encoding") {
	case "", "identity":
	default:
		rt.log.Warn("model response not metered: it is encoded although identity was asked for",
			"sandbox", rt.sandbox, "encoding", resp.Header.Get("Content-Encoding"))
		return nil
	}
	x.meter = newMeter(x.provider, isEventStream(resp.Header.Get("Content-Type")))
	resp.Body = &tappedBody{ReadCloser: resp.Body, see: x.meter.write}
	return nil
}

func isEventStream(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// upstreamError answers a request the provider could not be asked, in the provider's format.
func (rt *Route) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	x := r.Context().Value(exchangeKey{}).(*exchange)
	x.upErr = err
	if errors.Is(err, context.Canceled) {
		return // the sandbox went away; nobody reads an answer
	}
	status := http.StatusBadGateway
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		status = http.StatusGatewayTimeout
	}
	writeError(w, x.provider, &Error{Status: status, Code: CodeUpstream,
		Message: fmt.Sprintf("hiloop could not reach the %s API: %v", x.provider, err)})
	if rt.cfg.Unreachable != nil {
		rt.cfg.Unreachable(rt.sandbox, x.rec.SessionID, x.provider, err)
	}
}

// finish completes the record once the response has ended (or broken off) and hands it on.
func (rt *Route) finish(x *exchange, sw *statusWriter, r *http.Request, begin time.Time, panicked any) {
	x.rec.Duration = time.Since(begin)
	x.rec.Status = sw.status
	if x.meter != nil {
		x.meter.finish()
		x.rec.Tokens = x.meter.tokens
		x.rec.Model = x.meter.model
	}
	if x.rec.Model == "" && x.reqModel != nil {
		x.rec.Model = x.reqModel.get()
	}
	switch {
	case x.rec.Err != "":
	case r.Context().Err() != nil:
		x.rec.Err = "the sandbox went away before the response ended"
	case x.upErr != nil:
		x.rec.Err = "upstream: " + x.upErr.Error()
	case panicked == http.ErrAbortHandler:
		x.rec.Err = "the response broke off"
	case panicked != nil:
		x.rec.Err = fmt.Sprintf("internal error: %v", panicked)
		rt.log.Error("model route panic", "sandbox", rt.sandbox, "panic", panicked)
	}
	if rt.cfg.Sink != nil {
		rt.cfg.Sink(x.rec)
	}
}

// statusWriter notes the status the sandbox got; Unwrap lets http.ResponseController reach the
// server's writer to flush.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sizedBody is a request body that ends at its declared length (see ServeHTTP).
type sizedBody struct {
	io.Reader
	io.Closer
}

// tappedBody shows see every byte read through it, on its way: the response's to the meter,
// the request's to requestModel.
type tappedBody struct {
	io.ReadCloser
	see func([]byte)
}

func (b *tappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.see(p[:n])
	}
	return n, err
}

// maxRequestScan bounds how much of a request body is looked at for its model: the harnesses
// put "model" first, before the conversation.
const maxRequestScan = 64 << 10

// requestModel reads the top-level "model" of a request body as the transport sends it, for a
// response that does not name its model. The transport reads the body on a goroutine of its own.
type requestModel struct {
	mu   sync.Mutex
	js   jsonScan
	seen int
}

func (m *requestModel) write(p []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen >= maxRequestScan || m.js.got[fModel] != nil {
		return
	}
	p = p[:min(len(p), maxRequestScan-m.seen)]
	m.seen += len(p)
	m.js.feed(p)
}

func (m *requestModel) get() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.js.str(fModel)
}

// sessionHeaders are where harnesses name their session, most specific first (checked in
// their packages' code; see docs/architecture.md, "The model route"):
//
//	X-Claude-Code-Session-Id  Claude Code: its session id, which claude-agent-acp makes the ACP session id
//	Thread-Id                 Codex (0.166): the thread, which codex-acp makes the ACP session id
//	X-Session-Id              OpenCode: its session id (ses_…), also the ACP session id
//	Session-Id                Codex (0.166): the session the thread runs in
//	Session_id                Codex before the thread/session split: the conversation id
//	Conversation_id           older Codex
var sessionHeaders = []string{"X-Claude-Code-Session-Id", "Thread-Id", "X-Session-Id", "Session-Id", "Session_id", "Conversation_id"}

// parentHeaders name the session a sub-agent's session was spawned from.
var parentHeaders = []string{"X-Codex-Parent-Thread-Id", "X-Parent-Session-Id"}

// harnessSession reads the harness's session from the request's headers.
func harnessSession(h http.Header) HarnessSession {
	first := func(names []string) string {
		for _, n := range names {
			if v := usage.Label(strings.TrimSpace(h.Get(n))); v != "" {
				return v
			}
		}
		return ""
	}
	return HarnessSession{ID: first(sessionHeaders), Parent: first(parentHeaders)}
}

// cleanPath reports p as it should be: no empty, . or .. segments. A request whose path is not
// clean is refused, so that no spelling of a path reaches outside the upstream's base path.
func cleanPath(p string) string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	out := segs[:0]
	for i, s := range segs {
		if s == "." || s == ".." || (s == "" && i < len(segs)-1) {
			continue
		}
		out = append(out, s)
	}
	return "/" + strings.Join(out, "/")
}

// Handles reports whether the route serves a request for path: Handles(path), as a method so
// that the gateway can hold a route behind an interface of its own.
func (r *Route) Handles(path string) bool { return Handles(path) }
