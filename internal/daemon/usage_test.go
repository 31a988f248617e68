package daemon

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/usage"
	"github.com/hiloop/hiloop/pkg/api"
)

// usageDaemon is a daemon with what the usage and budget routes need: the store (sandbox
// "web" with session "s1", sandbox "db") and the usage store, served through the real routes.
func usageDaemon(t *testing.T) (*Daemon, *httptest.Server) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u, err := usage.Open(st.Owned("internal/usage"), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	for _, sb := range []store.Sandbox{{ID: "id-web", Name: "web"}, {ID: "id-db", Name: "db"}} {
		if err := st.CreateSandbox(sb); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateSession(store.Session{ID: "s1", Sandbox: "web", SandboxID: "id-web"}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	d := &Daemon{store: st, usage: u, log: log}
	srv := httptest.NewServer(asLocalAdmin(newMux(d.routes(), newIdempotency(st, log), log, nil), log))
	t.Cleanup(srv.Close)
	return d, srv
}

// call sends a request and decodes a 200 answer into out, or returns the error's code.
func call(t *testing.T, method, url, body string, out any) api.ErrorCode {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		code := errorCode(t, string(b))
		if want := code.HTTPStatus(); resp.StatusCode != want {
			t.Errorf("%s %s: status %d with code %s, which travels with %d", method, url, resp.StatusCode, code, want)
		}
		return code
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %v in %s", method, url, err, b)
	}
	return ""
}

func TestGetUsage(t *testing.T) {
	d, srv := usageDaemon(t)
	day := time.Date(2025, 6, 30, 9, 15, 0, 0, time.UTC)
	add := func(at time.Time, sandbox, session, model string, in, out int64) {
		d.usage.Add(usage.Record{Time: at, SandboxID: sandbox, SessionID: session, Provider: "anthropic", Model: model,
			Tokens: usage.Tokens{Input: in, Output: out, CacheRead: 1, CacheWrite: 2}, Status: 200})
	}
	add(day, "id-web", "s1", "opus", 100, 10)
	add(day.Add(time.Minute), "id-web", "", "haiku", 50, 5)
	add(day.Add(24*time.Hour), "id-db", "", "opus", 7, 3)
	totals := func(in, out, requests int64) api.UsageTotals {
		return api.UsageTotals{InputTokens: in, OutputTokens: out, CacheReadTokens: requests, CacheWriteTokens: 2 * requests,
			TotalTokens: in + out + 3*requests, Requests: requests}
	}

	var all api.UsageReport
	if code := call(t, "GET", srv.URL+"/v1/usage", "", &all); code != "" {
		t.Fatalf("GET /v1/usage: %s", code)
	}
	want := api.UsageReport{
		Total: totals(157, 18, 3),
		BySandbox: []api.UsageGroup{
			{Sandbox: "db", Owner: "admin", SandboxID: "id-db", UsageTotals: totals(7, 3, 1)},
			{Sandbox: "web", Owner: "admin", SandboxID: "id-web", UsageTotals: totals(150, 15, 2)},
		},
		BySession: []api.UsageGroup{
			{Sandbox: "db", Owner: "admin", SandboxID: "id-db", UsageTotals: totals(7, 3, 1)},
			{Sandbox: "web", Owner: "admin", SandboxID: "id-web", UsageTotals: totals(50, 5, 1)},
			{Sandbox: "web", Owner: "admin", SandboxID: "id-web", Session: "s1", UsageTotals: totals(100, 10, 1)},
		},
		ByModel: []api.UsageGroup{{Model: "haiku", UsageTotals: totals(50, 5, 1)}, {Model: "opus", UsageTotals: totals(107, 13, 2)}},
		ByDay:   []api.UsageGroup{{Day: "2025-06-30", UsageTotals: totals(150, 15, 2)}, {Day: "2025-07-01", UsageTotals: totals(7, 3, 1)}},
	}
	if !reflect.DeepEqual(all, want) {
		t.Errorf("all usage:\n got %+v\nwant %+v", all, want)
	}

	var rep api.UsageReport
	if code := call(t, "GET", srv.URL+"/v1/usage?sandbox=web", "", &rep); code != "" || rep.Total != totals(150, 15, 2) || len(rep.BySandbox) != 1 {
		t.Errorf("?sandbox=web: %s %+v", code, rep)
	}
	if code := call(t, "GET", srv.URL+"/v1/usage?session=s1", "", &rep); code != "" || rep.Total != totals(100, 10, 1) ||
		len(rep.BySession) != 1 || rep.BySession[0].Session != "s1" {
		t.Errorf("?session=s1: %s %+v", code, rep)
	}
	since := url.QueryEscape(day.Add(30 * time.Second).Format(time.RFC3339))
	if code := call(t, "GET", srv.URL+"/v1/usage?since="+since, "", &rep); code != "" || rep.Total != totals(57, 8, 2) {
		t.Errorf("?since=%s: %s %+v", since, code, rep)
	}
	var raw map[string]any
	future := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339Nano))
	if code := call(t, "GET", srv.URL+"/v1/usage?since="+future, "", &raw); code != "" {
		t.Fatalf("?since=%s: %s", future, code)
	}
	for _, list := range []string{"by_sandbox", "by_session", "by_model", "by_day"} {
		if l, ok := raw[list].([]any); !ok || len(l) != 0 {
			t.Errorf("no usage: %s is %v, want []", list, raw[list])
		}
	}

	for _, tc := range []struct {
		query string
		code  api.ErrorCode
	}{
		{"sandbox=nope", api.CodeSandboxNotFound},
		{"sandbox=Web", api.CodeInvalidName},
		{"session=zz9", api.CodeSessionNotFound},
		{"session=S-1", api.CodeSessionNotFound},
		{"session=s1&sandbox=db", api.CodeInvalidArgument},
		{"since=yesterday", api.CodeInvalidArgument},
		{"since=2025-06-30", api.CodeInvalidArgument},
	} {
		if code := call(t, "GET", srv.URL+"/v1/usage?"+tc.query, "", &rep); code != tc.code {
			t.Errorf("?%s: code %q, want %s", tc.query, code, tc.code)
		}
	}
}

func TestPutBudgets(t *testing.T) {
	d, srv := usageDaemon(t)
	d.usage.Add(usage.Record{Time: time.Now(), SandboxID: "id-web", SessionID: "s1", Provider: "anthropic",
		Tokens: usage.Tokens{Input: 900, Output: 100}, Status: 200})
	left := func(n int64) *int64 { return &n }
	spent := api.UsageTotals{InputTokens: 900, OutputTokens: 100, TotalTokens: 1000, Requests: 1}

	for _, tc := range []struct {
		path  string
		scope usage.Scope
	}{
		{"/v1/sandboxes/web/budget", usage.ScopeSandbox},
		{"/v1/sessions/s1/budget", usage.ScopeSession},
	} {
		var u api.ModelUsage
		// The same PUT twice is the same answer; a budget below what is spent refuses the next
		// request, on the scope it was set for.
		for range 2 {
			if code := call(t, "PUT", srv.URL+tc.path, `{"tokens":5000}`, &u); code != "" {
				t.Fatalf("PUT %s: %s", tc.path, code)
			}
			if want := (api.ModelUsage{UsageTotals: spent, BudgetTokens: 5000, RemainingTokens: left(4000)}); !reflect.DeepEqual(u, want) {
				t.Errorf("PUT %s 5000: %+v, want %+v", tc.path, u, want)
			}
		}
		if code := call(t, "PUT", srv.URL+tc.path, `{"tokens":600}`, &u); code != "" || *u.RemainingTokens != 0 {
			t.Fatalf("PUT %s 600: %s %+v", tc.path, code, u)
		}
		e, err := d.usage.Check("id-web", "s1")
		if err != nil || e == nil || e.Scope != tc.scope || e.Used != 1000 || e.Limit != 600 {
			t.Errorf("after PUT %s 600 the check found %+v, %v", tc.path, e, err)
		}
		u = api.ModelUsage{} // absent fields are left as they were by Unmarshal
		if code := call(t, "PUT", srv.URL+tc.path, `{"tokens":0}`, &u); code != "" || u.BudgetTokens != 0 || u.RemainingTokens != nil {
			t.Errorf("PUT %s 0: %s %+v, want no budget", tc.path, code, u)
		}
		if e, err := d.usage.Check("id-web", "s1"); e != nil || err != nil {
			t.Errorf("after the budget of %s is removed the check found %+v, %v", tc.path, e, err)
		}
		for _, body := range []string{`{}`, ``, `{"tokens":-1}`, `{"tokens":1000000000000001}`} {
			if code := call(t, "PUT", srv.URL+tc.path, body, &u); code != api.CodeInvalidArgument {
				t.Errorf("PUT %s %q: code %q, want invalid_argument", tc.path, body, code)
			}
		}
		for _, body := range []string{`{"tokens":"5"}`, `{"tokens":1.5}`, `{"limit":5}`} {
			if code := call(t, "PUT", srv.URL+tc.path, body, &u); code != api.CodeBadRequest {
				t.Errorf("PUT %s %q: code %q, want bad_request", tc.path, body, code)
			}
		}
	}
	for _, tc := range []struct {
		path string
		code api.ErrorCode
	}{
		{"/v1/sandboxes/nope/budget", api.CodeSandboxNotFound},
		{"/v1/sandboxes/No/budget", api.CodeInvalidName},
		{"/v1/sessions/zz9/budget", api.CodeSessionNotFound},
		{"/v1/sessions/S1/budget", api.CodeSessionNotFound},
	} {
		var u api.ModelUsage
		if code := call(t, "PUT", srv.URL+tc.path, `{"tokens":5}`, &u); code != tc.code {
			t.Errorf("PUT %s: code %q, want %s", tc.path, code, tc.code)
		}
	}

	// A sandbox deleted while its record is still read: its budget cannot be set.
	if err := d.usage.DeleteSandbox("id-db"); err != nil {
		t.Fatal(err)
	}
	var u api.ModelUsage
	if code := call(t, "PUT", srv.URL+"/v1/sandboxes/db/budget", `{"tokens":5}`, &u); code != api.CodeSandboxNotFound {
		t.Errorf("PUT the budget of a deleted sandbox: code %q, want sandbox_not_found", code)
	}
}

// TestUsageByNamespace: a user's usage report holds their sandboxes alone, the admin's theirs
// and those of deleted sandboxes, and all_users every one, each with its owner.
func TestUsageByNamespace(t *testing.T) {
	d, _ := usageDaemon(t)
	if err := d.store.CreateSandbox(store.Sandbox{ID: "id-api", Name: "bob.api"}); err != nil {
		t.Fatal(err)
	}
	if err := d.store.CreateSession(store.Session{ID: "s2", Sandbox: "bob.api", SandboxID: "id-api"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{"id-web", "id-api", "id-gone"} {
		d.usage.Add(usage.Record{Time: now, SandboxID: id, Provider: "anthropic", Tokens: usage.Tokens{Input: 10}, Status: 200})
	}
	srv := httptest.NewServer(asTestUser(newMux(d.routes(), newIdempotency(d.store, d.log), d.log, nil)))
	t.Cleanup(srv.Close)
	report := func(user, query string) (api.UsageReport, api.ErrorCode) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/usage"+query, nil)
		req.Header.Set("Test-User", user)
		if user == "admin" {
			req.Header.Set("Test-Admin", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var rep api.UsageReport
		if resp.StatusCode != http.StatusOK {
			return rep, errorCode(t, string(b))
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return rep, ""
	}
	sandboxes := func(rep api.UsageReport) string {
		var out []string
		for _, g := range rep.BySandbox {
			out = append(out, g.Owner+"/"+g.Sandbox+"/"+g.SandboxID)
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct{ user, query, want string }{
		{"bob", "", "bob/api/id-api"},
		{"bob", "?sandbox=api", "bob/api/id-api"},
		{"bob", "?session=s2", ""}, // no usage of the session, and no refusal
		{"admin", "", "//id-gone admin/web/id-web"},
		{"admin", "?all_users=true", "bob/api/id-api //id-gone admin/web/id-web"},
	} {
		rep, code := report(tc.user, tc.query)
		if code != "" || sandboxes(rep) != tc.want {
			t.Errorf("%s: GET /v1/usage%s = %s %q, want %q", tc.user, tc.query, code, sandboxes(rep), tc.want)
		}
	}
	for _, tc := range []struct {
		user, query string
		code        api.ErrorCode
	}{
		{"bob", "?sandbox=web", api.CodeSandboxNotFound},
		{"bob", "?session=s1", api.CodeSessionNotFound},
		{"bob", "?all_users=true", api.CodeForbidden},
		{"admin", "?sandbox=api", api.CodeSandboxNotFound},
	} {
		if _, code := report(tc.user, tc.query); code != tc.code {
			t.Errorf("%s: GET /v1/usage%s = %q, want %s", tc.user, tc.query, code, tc.code)
		}
	}
}
