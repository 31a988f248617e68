package modelroute

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/internal/usage"
)

// The operator's credentials the tests configure; the sandbox never sees them.
const (
	realAnthropicKey = "sk-ant-api03-REAL-operator-key-AA"
	realOAuthToken   = "sk-ant-oat01-REAL-operator-oauth"
	realOpenAIKey    = "sk-proj-REAL-operator-key"
)

// seen is a request as the fake provider got it.
type seen struct {
	Method, Path, Query string
	Header              http.Header
	Body                []byte
}

// env is a sandbox's model route served on loopback, in front of a fake provider on loopback.
type env struct {
	t       *testing.T
	tokens  *Tokens
	cfg     *Config
	up      *httptest.Server
	route   *httptest.Server
	client  *http.Client
	records chan usage.Record
	upReqs  chan seen
}

const testSandbox = "sb-a"

// newEnv starts a fake provider answering with serve (after noting each request) and the
// route of testSandbox in front of it; mods adjust the Config before the route is made.
func newEnv(t *testing.T, serve http.HandlerFunc, mods ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, tokens: newTokens(t), records: make(chan usage.Record, 16), upReqs: make(chan seen, 16)}
	e.up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.upReqs <- seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body}
		serve(w, r)
	}))
	t.Cleanup(e.up.Close)
	e.cfg = &Config{
		Tokens:    e.tokens,
		Upstream:  map[Provider]string{Anthropic: e.up.URL + "/base", OpenAI: e.up.URL + "/base"},
		Transport: &http.Transport{},
		Credential: func(_ context.Context, sandbox string, p Provider) (Credential, error) {
			if p == OpenAI {
				return Credential{APIKey: realOpenAIKey}, nil
			}
			return Credential{APIKey: realAnthropicKey}, nil
		},
		Sink: func(r usage.Record) { e.records <- r },
	}
	for _, m := range mods {
		m(e.cfg)
	}
	rt, err := New(testSandbox, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.route = httptest.NewServer(rt)
	t.Cleanup(e.route.Close)
	e.client = &http.Client{Transport: &http.Transport{}} // no proxy from the environment
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// token mints a token of a fresh start of sandbox for p.
func (e *env) token(sandbox string, p Provider) string {
	_, tok := mint(e.t, e.tokens, sandbox, p)
	return tok
}

// post sends body to path on the route with the token in x-api-key (Anthropic) or
// Authorization (OpenAI), plus headers.
func (e *env) post(ctx context.Context, path, token, body string, headers ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.route.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if strings.HasPrefix(path, "/openai/") {
		req.Header.Set("Authorization", "Bearer "+token)
	} else if token != "" {
		req.Header.Set("X-Api-Key", token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// record waits for the route's record of a request.
func (e *env) record() usage.Record {
	e.t.Helper()
	select {
	case r := <-e.records:
		return r
	case <-testenv.Deadline(e.t):
		e.t.Fatal("no usage record")
	}
	return usage.Record{}
}

// noUpstream checks that nothing reached the fake provider.
func (e *env) noUpstream() {
	e.t.Helper()
	select {
	case r := <-e.upReqs:
		e.t.Errorf("the provider was asked: %s %s", r.Method, r.Path)
	default:
	}
}

func serveFile(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := readFixtureFile(name)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Write(b)
	}
}

func readFixtureFile(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", name))
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The provider sees the operator's credential in the header its API wants, and never the
// token: not in any header, the URL or the body.
func TestCredentialSwap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		path   string
		cred   Credential
		header string // where the credential must be
		want   string
		beta   string // anthropic-beta the provider must see
	}{
		{"anthropic api key", "/anthropic/v1/messages?beta=true", Credential{APIKey: realAnthropicKey}, "X-Api-Key", realAnthropicKey, "fine-grained-tool-streaming-2025-05-14"},
		{"anthropic oauth", "/anthropic/v1/messages?beta=true", Credential{OAuthToken: realOAuthToken}, "Authorization", "Bearer " + realOAuthToken, "fine-grained-tool-streaming-2025-05-14,oauth-2025-04-20"},
		{"openai api key", "/openai/v1/responses", Credential{APIKey: realOpenAIKey, Header: http.Header{"Chatgpt-Account-Id": {"acct-operator"}}}, "Authorization", "Bearer " + realOpenAIKey, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, serveFile("anthropic_message.json", "application/json"), func(c *Config) {
				c.Credential = func(context.Context, string, Provider) (Credential, error) { return tc.cred, nil }
			})
			p, _, _ := split(strings.SplitN(tc.path, "?", 2)[0])
			tok := e.token(testSandbox, p)
			resp := e.post(context.Background(), tc.path, tok, `{"model":"m","messages":[]}`,
				"Anthropic-Beta", "fine-grained-tool-streaming-2025-05-14, oauth-2025-04-20",
				"Cookie", "session=sandbox", "OpenAI-Organization", "org-sandbox", "Chatgpt-Account-Id", "acct-sandbox",
				"Connection", "X-Hop", "X-Hop", "1", "X-Claude-Code-Session-Id", "harness-ses")
			readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			up := <-e.upReqs
			if got := up.Header.Get(tc.header); got != tc.want {
				t.Errorf("%s upstream %q, want %q", tc.header, got, tc.want)
			}
			if tc.header == "Authorization" && up.Header.Get("X-Api-Key") != "" {
				t.Errorf("x-api-key reached the provider: %q", up.Header.Get("X-Api-Key"))
			}
			if got := up.Header.Get("Anthropic-Beta"); p == Anthropic && got != tc.beta {
				t.Errorf("anthropic-beta %q, want %q", got, tc.beta)
			}
			for h, vs := range up.Header {
				for _, v := range vs {
					if strings.Contains(v, tok) || strings.Contains(v, "hiloop-") {
						t.Errorf("the token reached the provider in %s: %q", h, v)
					}
				}
			}
			if strings.Contains(up.Path+up.Query+string(up.Body), tok) {
				t.Error("the token reached the provider in the URL or body")
			}
			for _, h := range []string{"Cookie", "Openai-Organization", "X-Hop"} {
				if v := up.Header.Get(h); v != "" {
					t.Errorf("%s reached the provider: %q", h, v)
				}
			}
			if got := up.Header.Get("Chatgpt-Account-Id"); p == OpenAI && got != "acct-operator" {
				t.Errorf("chatgpt-account-id %q, want the credential's", got)
			}
			if up.Header.Get("X-Claude-Code-Session-Id") != "harness-ses" {
				t.Error("the harness's own headers must go through")
			}
			wantPath := "/base" + strings.TrimPrefix(strings.SplitN(tc.path, "?", 2)[0], "/"+string(p))
			if up.Path != wantPath || (p == Anthropic && up.Query != "beta=true") {
				t.Errorf("upstream %s?%s, want %s with the query kept", up.Path, up.Query, wantPath)
			}
			if up.Header.Get("Accept-Encoding") != "identity" {
				t.Errorf("accept-encoding %q", up.Header.Get("Accept-Encoding"))
			}
			if rec := e.record(); rec.HarnessSession != "harness-ses" || rec.Status != 200 {
				t.Errorf("record %+v", rec)
			}
		})
	}
}

// decodeError reads an error answer in either provider's format.
func decodeError(t *testing.T, p Provider, b []byte) (typ, code, msg string) {
	t.Helper()
	var a struct {
		Type  string `json:"type"`
		Error struct {
			Type, Code, Message string
		} `json:"error"`
	}
	var o struct {
		Error struct {
			Message, Type, Code string
			Param               *string
		} `json:"error"`
	}
	if p == OpenAI {
		if err := json.Unmarshal(b, &o); err != nil || o.Error.Message == "" {
			t.Fatalf("not an OpenAI error: %s", b)
		}
		return o.Error.Type, o.Error.Code, o.Error.Message
	}
	if err := json.Unmarshal(b, &a); err != nil || a.Type != "error" || a.Error.Message == "" {
		t.Fatalf("not an Anthropic error: %s", b)
	}
	return a.Error.Type, a.Error.Code, a.Error.Message
}

// Over HTTP: a token replayed on another sandbox's route or the other provider's route is a
// 403 wrong_audience in the provider's error format; a bad or ended one is a 401; none of them
// reaches the provider.
func TestRouteAudience(t *testing.T) {
	e := newEnv(t, serveFile("anthropic_message.json", "application/json"))
	start, revoked := mint(t, e.tokens, testSandbox, OpenAI)
	e.tokens.Revoke(start.ID)
	for _, tc := range []struct {
		name, path, token string
		status            int
		typ, code         string
	}{
		{"another sandbox's token", "/anthropic/v1/messages", e.token("sb-b", Anthropic), 403, "permission_error", CodeWrongAudience},
		{"the other provider's token", "/openai/v1/responses", e.token(testSandbox, Anthropic), 403, "invalid_request_error", CodeWrongAudience},
		{"an OpenAI token on the Anthropic route", "/anthropic/v1/messages", e.token(testSandbox, OpenAI), 403, "permission_error", CodeWrongAudience},
		{"a revoked token", "/openai/v1/responses", revoked, 401, "invalid_request_error", CodeInvalidToken},
		{"a real-looking key", "/anthropic/v1/messages", "sk-ant-api03-abcdefAA", 401, "authentication_error", CodeInvalidToken},
		{"no key", "/anthropic/v1/messages", "", 401, "authentication_error", CodeInvalidToken},
	} {
		p, _, _ := split(tc.path)
		resp := e.post(context.Background(), tc.path, tc.token, `{}`)
		b := readAll(t, resp)
		typ, code, msg := decodeError(t, p, b)
		if resp.StatusCode != tc.status || typ != tc.typ || code != tc.code || resp.Header.Get(HeaderError) != tc.code {
			t.Errorf("%s: %d %s %s (%s), want %d %s %s", tc.name, resp.StatusCode, typ, code, msg, tc.status, tc.typ, tc.code)
		}
		if code == CodeWrongAudience && !strings.Contains(msg, "wrong_audience") {
			t.Errorf("%s: the message %q does not name wrong_audience", tc.name, msg)
		}
		if resp.Header.Get("X-Should-Retry") != "false" {
			t.Errorf("%s: x-should-retry %q", tc.name, resp.Header.Get("X-Should-Retry"))
		}
	}
	e.noUpstream()
	select {
	case r := <-e.records:
		t.Errorf("a refused token made a usage record: %+v", r)
	default:
	}
}

// A stream goes through byte for byte and as it comes: the sandbox reads the first event while
// the provider still holds back the rest. The record carries the fixture's usage to the token.
func TestStreamPassThrough(t *testing.T) {
	data, err := readFixtureFile("anthropic_stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Index(data, []byte("\n\n")) + 2
	release := make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(data[:first])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(data[first:])
	}, func(c *Config) {
		c.Attribute = func(sandbox string, p Provider, h HarnessSession) string {
			if sandbox == testSandbox && p == Anthropic && h.ID == "cc-session-1" {
				return "hiloop-ses"
			}
			return ""
		}
	})
	resp := e.post(context.Background(), "/anthropic/v1/messages?beta=true", e.token(testSandbox, Anthropic),
		`{"model":"claude-sonnet-4-5","stream":true}`, "X-Claude-Code-Session-Id", "cc-session-1")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	got := readWhileHeld(t, resp.Body, first)
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got = append(got, rest...); !bytes.Equal(got, data) {
		t.Fatalf("the stream changed on the way:\n%q\nwant\n%q", got, data)
	}
	rec := e.record()
	want := usage.Tokens{Input: 472, Output: 87, CacheRead: 20411, CacheWrite: 1203}
	if rec.Tokens != want || rec.Model != "claude-sonnet-4-5-20250929" || rec.SessionID != "hiloop-ses" ||
		rec.HarnessSession != "cc-session-1" || rec.SandboxID != testSandbox || rec.Status != 200 ||
		rec.Provider != "anthropic" || rec.Path != "/v1/messages" || rec.Err != "" || rec.Duration <= 0 {
		t.Errorf("record %+v", rec)
	}
}

// Every dialect, streamed or not, is metered to the token through the route.
func TestRouteMetering(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.file, func(t *testing.T) {
			ct := "application/json"
			if f.sse {
				ct = "text/event-stream; charset=utf-8"
			}
			e := newEnv(t, serveFile(f.file, ct))
			path := "/anthropic/v1/messages"
			if f.provider == OpenAI {
				path = "/openai/v1/responses"
				if strings.HasPrefix(f.file, "chat") {
					path = "/openai/v1/chat/completions"
				}
			}
			resp := e.post(context.Background(), path, e.token(testSandbox, f.provider), `{"model":"asked-for"}`)
			body := readAll(t, resp)
			if want, _ := readFixtureFile(f.file); !bytes.Equal(body, want) {
				t.Errorf("body changed on the way")
			}
			rec := e.record()
			if rec.Tokens != f.tokens || rec.Model != f.model {
				t.Errorf("record %+v %q, want %+v %q", rec.Tokens, rec.Model, f.tokens, f.model)
			}
		})
	}
}

// A response that names no model (an error) is recorded with the model the request asked
// for; an endpoint that does not generate is recorded with no tokens even if its body has usage.
func TestRouteModelAndEndpoints(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/base/v1/messages" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}`)
			return
		}
		serveFile("anthropic_message.json", "application/json")(w, r)
	})
	tok := e.token(testSandbox, Anthropic)
	resp := e.post(context.Background(), "/anthropic/v1/messages", tok, `{"model":"claude-opus-4-1","messages":[{"role":"user","content":"hi"}]}`)
	readAll(t, resp)
	if rec := e.record(); rec.Status != 400 || rec.Model != "claude-opus-4-1" || rec.Tokens != (usage.Tokens{}) {
		t.Errorf("error response: %+v", rec)
	}
	resp = e.post(context.Background(), "/anthropic/v1/messages/count_tokens", tok, `{"model":"m"}`)
	readAll(t, resp)
	if rec := e.record(); rec.Status != 200 || rec.Tokens != (usage.Tokens{}) || rec.Path != "/v1/messages/count_tokens" {
		t.Errorf("a non-generating endpoint: %+v", rec)
	}
}

// A sandbox that goes away mid-stream still leaves a record of what was seen.
func TestClientGoneMidStream(t *testing.T) {
	data, err := readFixtureFile("anthropic_stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Index(data, []byte("\n\n")) + 2
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(data[:first])
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest never comes; the route drops the upstream request
	})
	ctx, cancel := context.WithCancel(context.Background())
	resp := e.post(ctx, "/anthropic/v1/messages", e.token(testSandbox, Anthropic), `{"stream":true}`)
	read := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		read <- line
	}()
	select {
	case line := <-read:
		if !strings.HasPrefix(line, "event: message_start") {
			t.Fatalf("first line %q", line)
		}
	case <-testenv.Deadline(t):
		t.Fatal("the first event never arrived")
	}
	cancel()
	resp.Body.Close()
	rec := e.record()
	if want := (usage.Tokens{Input: 472, Output: 1, CacheRead: 20411, CacheWrite: 1203}); rec.Tokens != want || rec.Err == "" || rec.Status != 200 {
		t.Errorf("record %+v, want tokens %+v and an error", rec, want)
	}
}

// A spent budget: 429 in the provider's format, saying it is hiloop's budget, with
// x-should-retry: false and no Retry-After; the provider is not asked, the daemon is told.
func TestBudgetSpent(t *testing.T) {
	var mu sync.Mutex
	var told []usage.Exceeded
	e := newEnv(t, serveFile("anthropic_message.json", "application/json"), func(c *Config) {
		c.Attribute = func(string, Provider, HarnessSession) string { return "ses-1" }
		c.Budget = func(sandbox, session string) (*usage.Exceeded, error) {
			if session == "ses-1" {
				return &usage.Exceeded{Scope: usage.ScopeSession, SandboxID: sandbox, SessionID: session, Used: 1503, Limit: 1500}, nil
			}
			return nil, nil
		}
		c.BudgetSpent = func(sandbox, session string, x usage.Exceeded) {
			mu.Lock()
			told = append(told, x)
			mu.Unlock()
		}
	})
	for _, p := range []Provider{Anthropic, OpenAI} {
		path := "/anthropic/v1/messages"
		if p == OpenAI {
			path = "/openai/v1/responses"
		}
		resp := e.post(context.Background(), path, e.token(testSandbox, p), `{}`)
		b := readAll(t, resp)
		typ, code, msg := decodeError(t, p, b)
		wantType := map[Provider]string{Anthropic: "billing_error", OpenAI: "insufficient_quota"}[p]
		if resp.StatusCode != 429 || typ != wantType || code != CodeBudgetExceeded {
			t.Errorf("%s: %d %s %s", p, resp.StatusCode, typ, code)
		}
		for _, s := range []string{"hiloop budget spent", "session ses-1's", "1503 of 1500 tokens", "not a limit of the provider"} {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: message %q lacks %q", p, msg, s)
			}
		}
		if strings.Contains(strings.ToLower(msg), "rate") {
			t.Errorf("%s: message %q reads like a rate limit", p, msg)
		}
		if resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Retry-After") != "" || resp.Header.Get("Retry-After-Ms") != "" {
			t.Errorf("%s: x-should-retry %q retry-after %q", p, resp.Header.Get("X-Should-Retry"), resp.Header.Get("Retry-After"))
		}
		if rec := e.record(); rec.Status != 429 || rec.SessionID != "ses-1" || rec.Err == "" {
			t.Errorf("%s: record %+v", p, rec)
		}
	}
	e.noUpstream()
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 || told[0].Scope != usage.ScopeSession || told[0].Used != 1503 {
		t.Errorf("BudgetSpent got %+v", told)
	}
}

// With the real store: a request in flight completes even though it crosses the budget; the
// next is refused; raising the budget lets the one after run.
func TestBudgetWithStore(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "sandboxd.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := usage.Open(db.Owned("internal/usage"), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		db.Close()
	})
	if err := st.SetSandboxBudget(testSandbox, 1000); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, serveFile("anthropic_stream.sse", "text/event-stream"), func(c *Config) {
		c.Budget = st.Check
		sink := c.Sink
		c.Sink = func(r usage.Record) { st.Add(r); sink(r) }
	})
	tok := e.token(testSandbox, Anthropic)
	want, _ := readFixtureFile("anthropic_stream.sse")
	resp := e.post(context.Background(), "/anthropic/v1/messages", tok, `{}`)
	if b := readAll(t, resp); resp.StatusCode != 200 || !bytes.Equal(b, want) {
		t.Fatalf("the request in budget: %d, %d bytes", resp.StatusCode, len(b))
	}
	e.record()
	resp = e.post(context.Background(), "/anthropic/v1/messages", tok, `{}`)
	readAll(t, resp)
	if resp.StatusCode != 429 {
		t.Fatalf("after crossing the budget: %d", resp.StatusCode)
	}
	e.record()
	if err := st.SetSandboxBudget(testSandbox, 1_000_000); err != nil {
		t.Fatal(err)
	}
	resp = e.post(context.Background(), "/anthropic/v1/messages", tok, `{}`)
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("after raising the budget: %d", resp.StatusCode)
	}
	e.record()
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	tot, _, err := st.SandboxUsage(testSandbox)
	if want := (usage.Totals{Requests: 3, Tokens: usage.Tokens{Input: 944, Output: 174, CacheRead: 40822, CacheWrite: 2406}}); err != nil || tot != want {
		t.Errorf("stored totals %+v (%v), want %+v", tot, err, want)
	}
}

func TestNoCredential(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("sandbox sb-a: %w", ErrNoCredential), 401, CodeNoCredential},
		{errors.New("the store is closed"), 503, CodeUpstream},
	} {
		e := newEnv(t, serveFile("chat.json", "application/json"), func(c *Config) {
			c.Credential = func(context.Context, string, Provider) (Credential, error) { return Credential{}, tc.err }
		})
		resp := e.post(context.Background(), "/openai/v1/chat/completions", e.token(testSandbox, OpenAI), `{}`)
		_, code, _ := decodeError(t, OpenAI, readAll(t, resp))
		if resp.StatusCode != tc.status || code != tc.code {
			t.Errorf("%v: %d %s, want %d %s", tc.err, resp.StatusCode, code, tc.status, tc.code)
		}
		e.noUpstream()
	}
}

func TestUpstreamDown(t *testing.T) {
	type told struct {
		sandbox, session string
		p                Provider
	}
	var unreachable []told
	e := newEnv(t, serveFile("chat.json", "application/json"), func(c *Config) {
		c.Unreachable = func(sb, ses string, p Provider, err error) {
			unreachable = append(unreachable, told{sb, ses, p})
		}
	})
	e.up.Close()
	resp := e.post(context.Background(), "/openai/v1/chat/completions", e.token(testSandbox, OpenAI), `{}`)
	typ, code, _ := decodeError(t, OpenAI, readAll(t, resp))
	if resp.StatusCode != 502 || typ != "server_error" || code != CodeUpstream {
		t.Errorf("%d %s %s", resp.StatusCode, typ, code)
	}
	rec := e.record()
	if rec.Status != 502 || !strings.HasPrefix(rec.Err, "upstream: ") {
		t.Errorf("record %+v", rec)
	}
	if len(unreachable) != 1 || unreachable[0] != (told{testSandbox, rec.SessionID, OpenAI}) {
		t.Errorf("Unreachable was told %+v", unreachable)
	}
}

// The route forwards over TLS with the certificate verified: a provider whose certificate the
// transport does not trust is not reached, and a transport that skips verification is refused.
func TestUpstreamTLS(t *testing.T) {
	up := httptest.NewUnstartedServer(serveFile("responses.json", "application/json"))
	up.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted client's handshake fails, as it should
	up.StartTLS()
	defer up.Close()
	for _, tc := range []struct {
		name      string
		transport http.RoundTripper
		status    int
	}{
		{"trusted", up.Client().Transport, 200},
		{"untrusted", &http.Transport{}, 502},
	} {
		tk := newTokens(t)
		records := make(chan usage.Record, 1)
		rt, err := New(testSandbox, &Config{
			Tokens: tk, Transport: tc.transport, Upstream: map[Provider]string{OpenAI: up.URL},
			Credential: func(context.Context, string, Provider) (Credential, error) {
				return Credential{APIKey: realOpenAIKey}, nil
			},
			Sink: func(r usage.Record) { records <- r },
		})
		if err != nil {
			t.Fatal(err)
		}
		_, tok := mint(t, tk, testSandbox, OpenAI)
		req := httptest.NewRequest(http.MethodPost, "/openai/v1/responses", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		rec := <-records
		if w.Code != tc.status || rec.Status != tc.status {
			t.Errorf("%s: %d (record %+v)", tc.name, w.Code, rec)
		}
		if tc.status == 200 && rec.Tokens != (usage.Tokens{Input: 200, Output: 52, CacheRead: 128}) {
			t.Errorf("%s: tokens %+v", tc.name, rec.Tokens)
		}
	}

	base := &Config{Tokens: newTokens(t), Transport: &http.Transport{},
		Credential: func(context.Context, string, Provider) (Credential, error) { return Credential{}, nil }}
	for name, mod := range map[string]func(c *Config){
		"skips verification": func(c *Config) {
			c.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
		},
		"http to a remote host": func(c *Config) { c.Upstream = map[Provider]string{Anthropic: "http://api.anthropic.com"} },
		"not a URL":             func(c *Config) { c.Upstream = map[Provider]string{OpenAI: "api.openai.com"} },
		"unknown provider":      func(c *Config) { c.Upstream = map[Provider]string{"gemini": "https://x.test"} },
		"no tokens":             func(c *Config) { c.Tokens = nil },
	} {
		c := *base
		mod(&c)
		if _, err := New(testSandbox, &c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestPaths(t *testing.T) {
	for path, want := range map[string]bool{
		"/anthropic/v1/messages": true, "/openai/v1/responses": true, "/anthropic/": true,
		"/anthropic": false, "/anthropicx/v1": false, "/v1/messages": false, "/gemini/v1": false, "": false,
	} {
		if Handles(path) != want {
			t.Errorf("Handles(%q) = %v", path, !want)
		}
	}
	e := newEnv(t, serveFile("chat.json", "application/json"))
	tok := e.token(testSandbox, OpenAI)
	for _, path := range []string{"/openai/v1/../../admin", "/openai//v1/responses", "/openai/v1/./responses", "/openai/v1/%2e%2e/x"} {
		resp := e.post(context.Background(), path, tok, `{}`)
		readAll(t, resp)
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", path, resp.StatusCode)
		}
	}
	// A WebSocket upgrade (Codex's Responses over WebSocket) is refused with 426, which Codex
	// takes as "use HTTP"; a stream over it could not be metered.
	req, err := http.NewRequest(http.MethodGet, e.route.URL+"/openai/v1/responses", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("websocket upgrade: %d, want 426", resp.StatusCode)
	}
	e.noUpstream()
}

// Each harness's session header is found; the most specific wins, sub-agents name a parent.
func TestHarnessSession(t *testing.T) {
	for _, tc := range []struct {
		headers []string
		want    HarnessSession
	}{
		{[]string{"X-Claude-Code-Session-Id", "3f2a-uuid"}, HarnessSession{ID: "3f2a-uuid"}},
		{[]string{"session-id", "codex-session", "thread-id", "codex-thread", "x-codex-parent-thread-id", "parent-thread"},
			HarnessSession{ID: "codex-thread", Parent: "parent-thread"}},
		{[]string{"x-session-affinity", "ses_1", "X-Session-Id", "ses_1", "x-parent-session-id", "ses_0"},
			HarnessSession{ID: "ses_1", Parent: "ses_0"}},
		{[]string{"session_id", "old-codex"}, HarnessSession{ID: "old-codex"}},
		{[]string{"conversation_id", "older-codex"}, HarnessSession{ID: "older-codex"}},
		{[]string{"X-Claude-Code-Session-Id", "bad\x01value", "X-Session-Id", "ok"}, HarnessSession{ID: "ok"}},
		{nil, HarnessSession{}},
	} {
		h := http.Header{}
		for i := 0; i+1 < len(tc.headers); i += 2 {
			h.Add(tc.headers[i], tc.headers[i+1])
		}
		if got := harnessSession(h); got != tc.want {
			t.Errorf("%v: %+v, want %+v", tc.headers, got, tc.want)
		}
	}
}

// A request with a body whose answer streams for a while is not cut off: once the route writes
// the response's headers, the server closes the request body, and a transport that then reads
// it again (to check the declared length) used to drop the upstream connection mid-stream.
func TestLongStreamAfterRequestBody(t *testing.T) {
	body := streamBody(2 << 20)
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	})
	tok := e.token(testSandbox, Anthropic)
	request := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"` + strings.Repeat("x", 4096) + `"}]}`
	for i := range 40 {
		resp := e.post(context.Background(), "/anthropic/v1/messages", tok, request)
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != int64(len(body)) {
			t.Fatalf("request %d: %d of %d bytes, %v", i, n, len(body), err)
		}
		<-e.upReqs
		if rec := e.record(); rec.Err != "" || rec.Output != 4000 {
			t.Fatalf("request %d: record %+v", i, rec)
		}
	}
}

// The ChatGPT route: Codex in ChatGPT mode presents its placeholder access token (the start's
// JWT-shaped token) and the placeholder account; the backend gets the login's access token and
// account, at the same path, the stream metered as the Responses API's. Only Codex's model
// requests and model list are carried; its account and telemetry calls are refused.
func TestChatGPTBackend(t *testing.T) {
	const access, account = "eyJ.REAL-chatgpt-access.sig", "acct-operator"
	e := newEnv(t, serveFile("responses_stream.sse", "text/event-stream"), func(c *Config) {
		c.Upstream[ChatGPT] = c.Upstream[OpenAI]
		c.Credential = func(_ context.Context, _ string, p Provider) (Credential, error) {
			if p != ChatGPT {
				return Credential{}, ErrNoCredential
			}
			return Credential{OAuthToken: access, Header: http.Header{"Chatgpt-Account-Id": {account}}, PlanType: "pro"}, nil
		}
	})
	start, err := e.tokens.Mint(testSandbox)
	if err != nil {
		t.Fatal(err)
	}
	ph, err := e.tokens.ChatGPTPlaceholders(start, "pro")
	if err != nil {
		t.Fatal(err)
	}
	resp := e.post(context.Background(), "/chatgpt/backend-api/codex/responses?x=1", ph.AccessToken, `{"model":"gpt-5-codex","stream":true}`,
		"Authorization", "Bearer "+ph.AccessToken, "Chatgpt-Account-Id", ph.AccountID, "Session-Id", "harness-ses", "X-Codex-Routing-Hint", "hint")
	body := readAll(t, resp)
	if want, _ := readFixtureFile("responses_stream.sse"); resp.StatusCode != 200 || !bytes.Equal(body, want) {
		t.Fatalf("status %d, body changed on the way: %q", resp.StatusCode, body)
	}
	up := <-e.upReqs
	if up.Path != "/base/backend-api/codex/responses" || up.Query != "x=1" {
		t.Errorf("backend asked for %s?%s, want /base/backend-api/codex/responses?x=1", up.Path, up.Query)
	}
	if got := up.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+access {
		t.Errorf("authorization %q, want only the access token", got)
	}
	if got := up.Header.Values("Chatgpt-Account-Id"); len(got) != 1 || got[0] != account {
		t.Errorf("chatgpt-account-id %q, want only the login's", got)
	}
	if up.Header.Get("X-Codex-Routing-Hint") != "hint" {
		t.Error("Codex's own headers must go through")
	}
	for h, vs := range up.Header {
		for _, v := range vs {
			if strings.Contains(v, "hiloop") {
				t.Errorf("a placeholder reached the backend in %s: %q", h, v)
			}
		}
	}
	rec := e.record()
	if rec.Tokens != (usage.Tokens{Input: 464, Output: 300, CacheRead: 1536}) || rec.Model != "gpt-5-codex" ||
		rec.Path != "/backend-api/codex/responses" || rec.HarnessSession != "harness-ses" || rec.Provider != string(ChatGPT) {
		t.Errorf("record %+v", rec)
	}

	// What Codex asks of the backend besides: refused, nothing forwarded.
	for _, path := range []string{"/chatgpt/backend-api/wham/accounts/check", "/chatgpt/backend-api/conversations", "/chatgpt/backend-api/codex/analytics-events/events"} {
		resp = e.post(context.Background(), path, "", `{}`, "Authorization", "Bearer "+ph.AccessToken)
		readAll(t, resp)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderError) != CodeEndpointNotAllowed {
			t.Errorf("%s: %d %s, want 403 %s", path, resp.StatusCode, resp.Header.Get(HeaderError), CodeEndpointNotAllowed)
		}
	}
	e.noUpstream()

	// The placeholder is the ChatGPT route's token only: on the OpenAI route it is another
	// audience's, and an OpenAI token is not the ChatGPT route's.
	resp = e.post(context.Background(), "/openai/v1/responses", ph.AccessToken, `{}`)
	readAll(t, resp)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderError) != CodeWrongAudience {
		t.Errorf("placeholder on /openai: %d %s, want 403 %s", resp.StatusCode, resp.Header.Get(HeaderError), CodeWrongAudience)
	}
	resp = e.post(context.Background(), "/chatgpt/backend-api/codex/responses", "", `{}`, "Authorization", "Bearer "+e.token(testSandbox, OpenAI))
	readAll(t, resp)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderError) != CodeWrongAudience {
		t.Errorf("openai token on /chatgpt: %d %s, want 403 %s", resp.StatusCode, resp.Header.Get(HeaderError), CodeWrongAudience)
	}
	// Once the start ends, so does its placeholder.
	e.tokens.Revoke(start.ID)
	resp = e.post(context.Background(), "/chatgpt/backend-api/codex/responses", "", `{}`, "Authorization", "Bearer "+ph.AccessToken)
	readAll(t, resp)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get(HeaderError) != CodeInvalidToken {
		t.Errorf("revoked placeholder: %d %s, want 401 %s", resp.StatusCode, resp.Header.Get(HeaderError), CodeInvalidToken)
	}
	e.noUpstream()
}

// Codex's own refresh, at the route's token endpoint, gets the start's placeholders again and
// goes nowhere; a refresh token of an ended start, of another sandbox or not ours is refused
// with the code on which Codex stops trying. Every refresh is told to HarnessRefresh.
func TestChatGPTRefreshAnsweredLocally(t *testing.T) {
	var told []string
	e := newEnv(t, serveFile("responses_stream.sse", "text/event-stream"), func(c *Config) {
		c.Credential = func(context.Context, string, Provider) (Credential, error) {
			return Credential{OAuthToken: "eyJ.REAL.sig", PlanType: "plus"}, nil
		}
		c.HarnessRefresh = func(sb, refused string) { told = append(told, sb+":"+refused) }
	})
	start, _ := e.tokens.Mint(testSandbox)
	ph, err := e.tokens.ChatGPTPlaceholders(start, "plus")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := e.tokens.Mint("sandbox-b")
	phOther, _ := e.tokens.ChatGPTPlaceholders(other, "plus")
	refresh := func(contentType, body string) (int, map[string]any) {
		t.Helper()
		resp, err := e.client.Post(e.route.URL+"/chatgpt/oauth/token", contentType, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(readAll(t, resp), &out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out
	}
	status, out := refresh("application/json", `{"client_id":"app_x","grant_type":"refresh_token","refresh_reason":"unauthorized_recovery","refresh_token":"`+ph.RefreshToken+`"}`)
	if status != 200 || out["access_token"] != ph.AccessToken || out["id_token"] != ph.IDToken || out["refresh_token"] != ph.RefreshToken {
		t.Errorf("refresh: %d %v, want the placeholders %+v", status, out, ph)
	}
	status, out = refresh("application/x-www-form-urlencoded", "grant_type=refresh_token&refresh_token="+ph.RefreshToken)
	if status != 200 || out["access_token"] != ph.AccessToken {
		t.Errorf("form refresh: %d %v", status, out)
	}
	for _, body := range []string{
		`{"grant_type":"refresh_token","refresh_token":"` + phOther.RefreshToken + `"}`,
		`{"grant_type":"refresh_token","refresh_token":"rt_REAL-refresh"}`,
	} {
		status, out = refresh("application/json", body)
		if e, _ := out["error"].(map[string]any); status < 400 || e["code"] != "refresh_token_invalidated" {
			t.Errorf("%s: %d %v, want a refusal with refresh_token_invalidated", body, status, out)
		}
	}
	e.tokens.Revoke(start.ID)
	status, _ = refresh("application/json", `{"grant_type":"refresh_token","refresh_token":"`+ph.RefreshToken+`"}`)
	if status != http.StatusUnauthorized {
		t.Errorf("refresh of an ended start: %d, want 401", status)
	}
	e.noUpstream()
	if len(told) != 5 || told[0] != testSandbox+":" || told[1] != testSandbox+":" || told[4] == testSandbox+":" {
		t.Errorf("HarnessRefresh told %q", told)
	}
}

// A request refused for want of a credential is told to NoCredential, with the callback's
// reason; one the credential store failed to answer is not (it is the daemon's own fault).
func TestNoCredentialTold(t *testing.T) {
	var told []error
	fail := ErrNoCredential
	e := newEnv(t, serveFile("chat.json", "application/json"), func(c *Config) {
		c.Credential = func(context.Context, string, Provider) (Credential, error) { return Credential{}, fail }
		c.NoCredential = func(sb, ses string, p Provider, err error) {
			if sb == testSandbox && p == OpenAI {
				told = append(told, err)
			}
		}
	})
	fail = fmt.Errorf("%w: the codex login needs reconnecting", ErrNoCredential)
	resp := e.post(context.Background(), "/openai/v1/chat/completions", e.token(testSandbox, OpenAI), `{}`)
	_, code, msg := decodeError(t, OpenAI, readAll(t, resp))
	if resp.StatusCode != http.StatusUnauthorized || code != CodeNoCredential || msg != "hiloop has no usable openai credential for this sandbox: the codex login needs reconnecting" ||
		len(told) != 1 || !strings.Contains(told[0].Error(), "needs reconnecting") {
		t.Fatalf("%d %s %q, told %v", resp.StatusCode, code, msg, told)
	}
	fail = errors.New("the store is closed")
	resp = e.post(context.Background(), "/openai/v1/chat/completions", e.token(testSandbox, OpenAI), `{}`)
	readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || len(told) != 1 {
		t.Fatalf("%d, told %v", resp.StatusCode, told)
	}
	e.noUpstream()
}

// Only generation, token counts and model lists reach the provider: the rest of its API (files,
// batches, stored responses, fine-tuning) would open the operator's account to every sandbox,
// or generate unmetered.
func TestEndpointsNotAllowed(t *testing.T) {
	e := newEnv(t, serveFile("chat.json", "application/json"))
	for _, c := range []struct {
		p            Provider
		method, path string
	}{
		{OpenAI, http.MethodGet, "/openai/v1/files"},
		{OpenAI, http.MethodPost, "/openai/v1/batches"},
		{OpenAI, http.MethodGet, "/openai/v1/responses/resp_1"},
		{OpenAI, http.MethodPost, "/openai/v1/embeddings"},
		{OpenAI, http.MethodDelete, "/openai/v1/models/ft-1"},
		{OpenAI, http.MethodGet, "/openai/v1/models/a/b"},
		{Anthropic, http.MethodPost, "/anthropic/v1/messages/batches"},
		{Anthropic, http.MethodGet, "/anthropic/v1/messages"},
	} {
		req, err := http.NewRequest(c.method, e.route.URL+c.path, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if c.p == OpenAI {
			req.Header.Set("Authorization", "Bearer "+e.token(testSandbox, c.p))
		} else {
			req.Header.Set("X-Api-Key", e.token(testSandbox, c.p))
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderError) != CodeEndpointNotAllowed {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, resp.Header.Get(HeaderError))
		}
	}
	e.noUpstream()
	for _, c := range []struct {
		p            Provider
		method, path string
	}{
		{OpenAI, http.MethodGet, "/v1/models"},
		{OpenAI, http.MethodGet, "/v1/models/gpt-5"},
		{Anthropic, http.MethodPost, "/v1/messages/count_tokens"},
	} {
		if !endpointAllowed(c.p, c.method, c.path) {
			t.Errorf("%s %s refused", c.method, c.path)
		}
	}
}

// A provider's URL is refused at once for each way it cannot be reached safely; the parts of a
// valid one are kept.
func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // the URL it parses to, or a part of the refusal
		ok   bool
	}{
		{raw: "https://api.anthropic.com/", want: "https://api.anthropic.com", ok: true},
		{raw: "https://proxy.example.com:8443/anthropic", want: "https://proxy.example.com:8443/anthropic", ok: true},
		{raw: "http://127.0.0.1:8080", want: "http://127.0.0.1:8080", ok: true},
		{raw: "http://[::1]:8080/v1/", want: "http://[::1]:8080/v1", ok: true},
		{raw: "http://localhost:8080", want: "http://localhost:8080", ok: true},
		{raw: "http://127.0.0.1:", want: "an empty port after ':'"},
		{raw: "https://api.example.com:", want: "an empty port after ':'"},
		{raw: "http://[::1]:", want: "an empty port after ':'"},
		{raw: "http://127.0.0.1:0", want: "port 0: give one from 1 to 65535"},
		{raw: "https://api.example.com:65536", want: "port 65536"},
		{raw: "https://:443", want: "no host"},
		{raw: "https://", want: "no host"},
		{raw: "http://", want: "no host"},
		{raw: "ftp://x.test", want: "want an http or https URL"},
		{raw: "127.0.0.1:8080", want: "want an http or https URL"},
		{raw: "https://x.test:port", want: "want an http or https URL"},
		{raw: "https://u:p@x.test", want: "a user or password"},
		{raw: "https://x.test/?a=b", want: "a query or fragment"},
		{raw: "https://x.test/#f", want: "a query or fragment"},
		{raw: "http://api.example.com", want: "http:// only to a loopback address"},
		{raw: "http://10.0.0.1:8080", want: "http:// only to a loopback address"},
		// Every problem of one URL at once.
		{raw: "http://u@api.example.com:0/?q", want: "port 0: give one from 1 to 65535, or none for the scheme's; a user or password in the URL: the daemon sends the provider's credential itself; a query or fragment: want a base URL without them; http:// only to a loopback address: use https"},
	} {
		u, err := ParseUpstream(tc.raw)
		switch {
		case tc.ok && (err != nil || u.String() != tc.want):
			t.Errorf("ParseUpstream(%q) = %v, %v; want %s", tc.raw, u, err, tc.want)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ParseUpstream(%q) = %v, %v; want a refusal saying %q", tc.raw, u, err, tc.want)
		}
	}
}
