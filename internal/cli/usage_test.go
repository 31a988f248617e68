package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/api"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2025, 6, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time // zero with ok: all usage
		ok   bool
	}{
		{"", time.Time{}, true},
		{"90m", now.Add(-90 * time.Minute), true},
		{"24h", now.Add(-24 * time.Hour), true},
		{"7d", now.Add(-7 * 24 * time.Hour), true},
		{"2025-06-01T08:00:00+02:00", time.Date(2025, 6, 1, 6, 0, 0, 0, time.UTC), true},
		{"0s", time.Time{}, false},
		{"-2h", time.Time{}, false},
		{"0d", time.Time{}, false},
		{"d", time.Time{}, false},
		{"1.5d", time.Time{}, false},
		{"36501d", time.Time{}, false},
		{"2025-06-01", time.Time{}, false},
		{"yesterday", time.Time{}, false},
	} {
		got, err := parseSince(tc.in, now)
		if (err == nil) != tc.ok || !got.Equal(tc.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && exitCode(err) != ExitUsage {
			t.Errorf("parseSince(%q): exit %d, want a usage error", tc.in, exitCode(err))
		}
	}
}

// fakeUsageDaemon answers the usage and budget routes with report and the budget it was last
// given, and keeps the queries and bodies it got.
type fakeUsageDaemon struct {
	mu      sync.Mutex
	report  api.UsageReport
	queries []url.Values
	puts    []string // "PATH tokens"
}

func (d *fakeUsageDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/usage":
		d.queries = append(d.queries, r.URL.Query())
		json.NewEncoder(w).Encode(d.report)
	case r.Method == "PUT" && strings.HasSuffix(r.URL.Path, "/budget"):
		var p api.BudgetPut
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Tokens == nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Errorf(api.CodeInvalidArgument, "tokens is required")})
			return
		}
		d.puts = append(d.puts, r.URL.Path+" "+fmtInt(*p.Tokens))
		u := api.ModelUsage{UsageTotals: api.UsageTotals{InputTokens: 900, OutputTokens: 100, TotalTokens: 1000, Requests: 2}, BudgetTokens: *p.Tokens}
		if *p.Tokens > 0 {
			left := max(*p.Tokens-1000, 0)
			u.RemainingTokens = &left
		}
		json.NewEncoder(w).Encode(u)
	default:
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Errorf(api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)})
	}
}

func newFakeUsage(t *testing.T) (*fakeUsageDaemon, *Factory, *bytes.Buffer) {
	t.Helper()
	d := &fakeUsageDaemon{report: api.UsageReport{BySandbox: []api.UsageGroup{}, BySession: []api.UsageGroup{},
		ByModel: []api.UsageGroup{}, ByDay: []api.UsageGroup{}}}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	out := &bytes.Buffer{}
	return d, &Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: &bytes.Buffer{}}, Host: srv.URL}, out
}

func TestUsageCommand(t *testing.T) {
	d, f, out := newFakeUsage(t)
	if code := run(f, "usage"); code != 0 || out.String() != "no model usage\n" {
		t.Errorf("no usage: exit %d, %q", code, out)
	}
	tot := func(in, out, req int64) api.UsageTotals {
		return api.UsageTotals{InputTokens: in, OutputTokens: out, CacheReadTokens: 1, CacheWriteTokens: 2, TotalTokens: in + out + 3, Requests: req}
	}
	d.report = api.UsageReport{
		From:      time.Date(2025, 6, 30, 9, 0, 0, 0, time.UTC),
		Total:     tot(150, 15, 2),
		BySandbox: []api.UsageGroup{{Sandbox: "web", SandboxID: "id-web", UsageTotals: tot(150, 15, 2)}},
		BySession: []api.UsageGroup{
			{Sandbox: "web", SandboxID: "id-web", UsageTotals: tot(50, 5, 1)},
			{Sandbox: "web", SandboxID: "id-web", Session: "s1", UsageTotals: tot(100, 10, 1)},
		},
		ByModel: []api.UsageGroup{{UsageTotals: tot(50, 5, 1)}, {Model: "claude-opus", UsageTotals: tot(100, 10, 1)}},
		ByDay:   []api.UsageGroup{{Day: "2025-06-30", UsageTotals: tot(150, 15, 2)}},
	}
	out.Reset()
	if code := run(f, "usage", "--sandbox", "web", "--session", "s1", "--since", "2025-06-30T09:00:00Z"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	q := d.queries[len(d.queries)-1]
	if q.Get("sandbox") != "web" || q.Get("session") != "s1" || q.Get("since") != "2025-06-30T09:00:00Z" {
		t.Errorf("the daemon was asked %v", q)
	}
	// Sections apart, each with its key columns; the since line is local time, so left out.
	lines := strings.Split(out.String(), "\n")
	var got []string
	for _, l := range lines[1:] {
		got = append(got, strings.Join(regexpSpaces.Split(strings.TrimSpace(l), -1), "|"))
	}
	want := []string{
		"",
		"SANDBOX|INPUT|OUTPUT|CACHE READ|CACHE WRITE|TOTAL|REQUESTS",
		"web|150|15|1|2|168|2",
		"",
		"SANDBOX|SESSION|INPUT|OUTPUT|CACHE READ|CACHE WRITE|TOTAL|REQUESTS",
		"web|(none)|50|5|1|2|58|1",
		"web|s1|100|10|1|2|113|1",
		"",
		"MODEL|INPUT|OUTPUT|CACHE READ|CACHE WRITE|TOTAL|REQUESTS",
		"(unknown)|50|5|1|2|58|1",
		"claude-opus|100|10|1|2|113|1",
		"",
		"DAY (UTC)|INPUT|OUTPUT|CACHE READ|CACHE WRITE|TOTAL|REQUESTS",
		"2025-06-30|150|15|1|2|168|2",
		"",
		"INPUT|OUTPUT|CACHE READ|CACHE WRITE|TOTAL|REQUESTS",
		"total|150|15|1|2|168|2",
		"",
	}
	if !strings.HasPrefix(lines[0], "since ") || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nfields:\n%s", out, strings.Join(got, "\n"))
	}

	// A duration is sent as the time it goes back to.
	before := time.Now()
	if code := run(f, "usage", "--since", "2h", "-o", "json"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	since, err := time.Parse(time.RFC3339Nano, d.queries[len(d.queries)-1].Get("since"))
	if err != nil || since.Before(before.Add(-2*time.Hour-time.Second)) || since.After(time.Now().Add(-2*time.Hour)) {
		t.Errorf("--since 2h asked for since=%v (%v)", since, err)
	}
}

func TestBudgetCommands(t *testing.T) {
	d, f, out := newFakeUsage(t)
	for _, tc := range []struct {
		args   []string
		put    string
		stdout string
	}{
		{[]string{"sandbox", "budget", "web", "--tokens", "5000"}, "/v1/sandboxes/web/budget 5000",
			"web: model token budget 1000/5000 tokens used, 4000 left\n"},
		{[]string{"sandbox", "budget", "web", "--tokens", "800"}, "/v1/sandboxes/web/budget 800",
			"web: model token budget 1000/800 tokens used, spent: the model route refuses requests until it is raised\n"},
		{[]string{"sandbox", "budget", "web", "--clear"}, "/v1/sandboxes/web/budget 0", "web: no model token budget, 1000 tokens used\n"},
		{[]string{"session", "budget", "s1", "--tokens", "0"}, "/v1/sessions/s1/budget 0", "s1: no token budget, 1000 tokens used\n"},
		{[]string{"session", "budget", "s1", "--tokens", "1500"}, "/v1/sessions/s1/budget 1500", "s1: token budget 1000/1500 tokens used, 500 left\n"},
	} {
		out.Reset()
		if code := run(f, tc.args...); code != 0 || out.String() != tc.stdout || d.puts[len(d.puts)-1] != tc.put {
			t.Errorf("%q: exit %d, stdout %q, daemon got %q; want %q, %q", tc.args, code, out, d.puts, tc.stdout, tc.put)
		}
	}
	out.Reset()
	if code := run(f, "session", "budget", "s1", "--tokens", "1500", "-o", "json"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var u api.ModelUsage
	if err := json.Unmarshal(out.Bytes(), &u); err != nil || u.BudgetTokens != 1500 || u.RemainingTokens == nil || *u.RemainingTokens != 500 {
		t.Errorf("-o json: %s (%v)", out, err)
	}
}

func TestModelUsageRows(t *testing.T) {
	left := int64(0)
	for _, tc := range []struct {
		u    *api.ModelUsage
		want string
	}{
		{nil, ""},
		{&api.ModelUsage{}, "model tokens:|0 in 0 requests (input 0, output 0, cache read 0, cache write 0)\nmodel budget:|none"},
		{&api.ModelUsage{UsageTotals: api.UsageTotals{InputTokens: 7, OutputTokens: 2, CacheReadTokens: 1, TotalTokens: 10, Requests: 1},
			BudgetTokens: 10, RemainingTokens: &left},
			"model tokens:|10 in 1 request (input 7, output 2, cache read 1, cache write 0)\nmodel budget:|10/10 tokens used, spent: the model route refuses requests until it is raised"},
	} {
		tb := &table{}
		modelUsageRows(tb, tc.u)
		var got []string
		for _, r := range tb.rows {
			got = append(got, strings.Join(r, "|"))
		}
		if strings.Join(got, "\n") != tc.want {
			t.Errorf("%+v:\n got %q\nwant %q", tc.u, strings.Join(got, "\n"), tc.want)
		}
	}
}

// --all-users asks for every user's usage and leads the sandbox sections with USER.
func TestUsageAllUsers(t *testing.T) {
	d, f, out := newFakeUsage(t)
	tot := api.UsageTotals{InputTokens: 10, TotalTokens: 10, Requests: 1}
	d.report = api.UsageReport{
		Total:     tot,
		BySandbox: []api.UsageGroup{{Sandbox: "web", Owner: "bob", SandboxID: "id-web", UsageTotals: tot}},
		BySession: []api.UsageGroup{{Sandbox: "web", Owner: "bob", SandboxID: "id-web", UsageTotals: tot}},
		ByModel:   []api.UsageGroup{{Model: "m", UsageTotals: tot}},
		ByDay:     []api.UsageGroup{{Day: "2025-06-30", UsageTotals: tot}},
	}
	if code := run(f, "usage", "--all-users"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if q := d.queries[len(d.queries)-1]; q.Get("all_users") != "true" {
		t.Errorf("the daemon was asked %v", q)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "USER") || !strings.HasPrefix(lines[1], "bob") ||
		!strings.HasPrefix(lines[3], "USER") || !strings.HasPrefix(lines[4], "bob") {
		t.Errorf("table:\n%s", out)
	}
	out.Reset()
	if code := run(f, "usage"); code != 0 || strings.Contains(out.String(), "USER") || d.queries[len(d.queries)-1].Has("all_users") {
		t.Errorf("without --all-users: exit %d, asked %v,\n%s", code, d.queries[len(d.queries)-1], out)
	}
}
