package daemon

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
)

// frontNotServed is every route a cluster's front does not serve yet: a route added to the
// host's table lands here until someone decides who answers it on a cluster.
var frontNotServed = []string{
	"GET /v1/ssh-keys", "POST /v1/ssh-keys", "DELETE /v1/ssh-keys/{key}",
	"POST /v1/secrets", "GET /v1/secrets", "GET /v1/secrets/{secret}", "DELETE /v1/secrets/{secret}", "POST /v1/secrets/{secret}/rotate",
	"PUT /v1/logins/{provider}", "GET /v1/logins", "GET /v1/logins/{provider}", "DELETE /v1/logins/{provider}",
	"GET /v1/images", "GET /v1/images/{name}", "DELETE /v1/images/{name}", "POST /v1/images/{name}/build",
	"POST /v1/images/{name}/import", "POST /v1/images/{name}/pull",
}

// Every route of the host is on the front, with its scope, and answered by whom its path says:
// what names a sandbox goes to its agent (but its life: create, get, start, stop, delete),
// what names a session or snapshot to the agent that has it, users and trust by the front.
func TestFrontRoutes(t *testing.T) {
	d := &Daemon{}
	host := d.routeTable()
	fr := d.frontRoutes()
	if len(fr) != len(host) {
		t.Fatalf("the front has %d routes, the host %d", len(fr), len(host))
	}
	for i, rt := range host {
		id := rt.method + " " + rt.pattern
		if fr[i].method != rt.method || fr[i].pattern != rt.pattern || fr[i].scope != rt.scope {
			t.Errorf("route %d: the front has %s %s (%s), the host %s (%s)", i, fr[i].method, fr[i].pattern, fr[i].scope, id, rt.scope)
		}
		if fr[i].idempotent {
			t.Errorf("%s keeps receipts on the front, which has no store", id)
		}
		role := d.roleOf(rt)
		var want frontRole
		switch {
		case slices.Contains(frontNotServed, id):
			want = roleNone
		case strings.HasPrefix(rt.pattern, "/v1/users"), rt.pattern == trustPath, rt.pattern == "/v1/whoami", rt.pattern == "/v1/version":
			want = roleFront
		case rt.pattern == "/v1/sandboxes", rt.pattern == "/v1/sandboxes/{name}", strings.HasSuffix(rt.pattern, "/start"), strings.HasSuffix(rt.pattern, "/stop"):
			want = roleFront
		case strings.HasPrefix(rt.pattern, "/v1/sandboxes/{name}/"):
			want = roleSandboxAgent
		case rt.method == http.MethodPost && rt.pattern == "/v1/sessions":
			want = roleFront // by its body's sandbox
		case rt.scope == scopeSession, rt.scope == scopeSnapshot:
			want = roleFoundAgent
		case rt.method == http.MethodGet && rt.scope == scopeList, id == "GET /v1/audit":
			want = roleEveryAgent
		default:
			t.Errorf("%s: no decision of who answers it on a front: add it to frontNotServed or serve it", id)
			continue
		}
		if role != want {
			t.Errorf("%s is answered by %q on a front, want %q", id, role, want)
		}
	}
	for _, id := range frontNotServed {
		if !slices.ContainsFunc(host, func(rt route) bool { return rt.method+" "+rt.pattern == id }) {
			t.Errorf("frontNotServed has %s, which is no route", id)
		}
	}
}

// A call routed to an agent carries the user the front authenticated, never a credential or a
// front header of the caller's.
func TestAsFront(t *testing.T) {
	for _, tc := range []struct {
		p         identity.Principal
		wantAdmin string
	}{
		{identity.Principal{User: "alice"}, "false"},
		{identity.Principal{User: "root", Admin: true, As: "alice"}, "true"},
	} {
		h := http.Header{}
		h.Set("Authorization", "Bearer hl_secret")
		h.Add(api.FrontUserHeader, "admin")
		h.Add(api.FrontUserHeader, "mallory")
		h.Set(api.FrontAdminHeader, "true")
		h.Set(api.AsHeader, "alice")
		asFront(h, tc.p)
		if h.Get("Authorization") != "" {
			t.Errorf("%+v: the caller's credential goes to the agent", tc.p)
		}
		if got := h.Values(api.FrontUserHeader); len(got) != 1 || got[0] != tc.p.User {
			t.Errorf("%+v: %s %v", tc.p, api.FrontUserHeader, got)
		}
		if got := h.Values(api.FrontAdminHeader); len(got) != 1 || got[0] != tc.wantAdmin {
			t.Errorf("%+v: %s %v", tc.p, api.FrontAdminHeader, got)
		}
		if h.Get(api.AsHeader) != "alice" {
			t.Errorf("%+v: Hiloop-As is dropped", tc.p)
		}
	}
}

func TestMergeUsage(t *testing.T) {
	a := api.UsageReport{
		Total:     api.UsageTotals{InputTokens: 1, Requests: 1},
		BySandbox: []api.UsageGroup{{Sandbox: "web", Owner: "alice", UsageTotals: api.UsageTotals{InputTokens: 1, Requests: 1}}},
		ByModel:   []api.UsageGroup{{Model: "m", UsageTotals: api.UsageTotals{InputTokens: 1, Requests: 1}}},
	}
	b := api.UsageReport{
		Total:     api.UsageTotals{InputTokens: 2, Requests: 3},
		BySandbox: []api.UsageGroup{{Sandbox: "api", Owner: "alice", UsageTotals: api.UsageTotals{InputTokens: 2, Requests: 3}}},
		ByModel:   []api.UsageGroup{{Model: "m", UsageTotals: api.UsageTotals{InputTokens: 2, Requests: 3}}},
	}
	got := mergeUsage([]api.UsageReport{a, b})
	if got.Total.InputTokens != 3 || got.Total.Requests != 4 {
		t.Errorf("total %+v", got.Total)
	}
	if len(got.BySandbox) != 2 {
		t.Errorf("by sandbox %+v", got.BySandbox)
	}
	if len(got.ByModel) != 1 || got.ByModel[0].InputTokens != 3 || got.ByModel[0].Requests != 4 {
		t.Errorf("by model %+v", got.ByModel)
	}
	if got := mergeUsage(nil); got.BySandbox == nil || got.ByDay == nil {
		t.Errorf("no agent: %+v, want empty lists", got)
	}
}

func TestCheckFrontFlags(t *testing.T) {
	ok := FrontConfig{Namespace: DefaultClusterNamespace, DefaultUserNamespace: DefaultDefaultUserNamespace}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Listen: "127.0.0.1:8443", Front: &ok}, ""},
		{Config{Front: &ok}, "--cluster needs --listen"},
		{Config{Listen: ":8443", TLSCertFile: "c", TLSKeyFile: "k", Front: &ok}, "--cluster with --tls-cert"},
		{Config{Listen: ":8443", Front: &FrontConfig{Namespace: "Hiloop", DefaultUserNamespace: "x"}}, "invalid --cluster-namespace"},
		{Config{Listen: ":8443", Front: &FrontConfig{Namespace: "a", DefaultUserNamespace: "a_b"}}, "invalid --default-user-namespace"},
	} {
		err := checkFrontFlags(tc.cfg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
