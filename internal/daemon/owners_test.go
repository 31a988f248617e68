package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// routeScopes is the owner decision of every route of the API: a route added to routes.go
// must be added here too, with the scope it declares, or TestEveryRouteHasAnOwner fails. The
// scope is what the daemon checks before the route's handler runs (owners.go).
var routeScopes = map[string]scope{
	"GET /v1/version": scopePublic,
	"GET /v1/whoami":  scopePublic,
	"POST /v1/trust":  scopePublic,

	"POST /v1/users":                         scopeUser,
	"GET /v1/users":                          scopeUser,
	"GET /v1/users/{user}":                   scopeAccount,
	"DELETE /v1/users/{user}":                scopeUser,
	"POST /v1/users/{user}/trust-token":      scopeUser,
	"POST /v1/users/{user}/tokens":           scopeAccount,
	"GET /v1/users/{user}/tokens":            scopeAccount,
	"DELETE /v1/users/{user}/tokens/{token}": scopeAccount,

	"GET /v1/sandboxes":                                 scopeList,
	"POST /v1/sandboxes":                                scopeList,
	"GET /v1/sandboxes/{name}":                          scopeSandbox,
	"DELETE /v1/sandboxes/{name}":                       scopeSandbox,
	"POST /v1/sandboxes/{name}/start":                   scopeSandbox,
	"POST /v1/sandboxes/{name}/stop":                    scopeSandbox,
	"GET /v1/sandboxes/{name}/exec":                     scopeSandbox,
	"GET /v1/sandboxes/{name}/ports/{port}":             scopeSandbox,
	"POST /v1/sandboxes/{name}/exposures":               scopeSandbox,
	"GET /v1/sandboxes/{name}/exposures":                scopeSandbox,
	"DELETE /v1/sandboxes/{name}/exposures/{port}":      scopeSandbox,
	"POST /v1/sandboxes/{name}/grow":                    scopeSandbox,
	"GET /v1/sandboxes/{name}/egress/log":               scopeSandbox,
	"POST /v1/sandboxes/{name}/restore":                 scopeSandbox,
	"PUT /v1/sandboxes/{name}/egress":                   scopeSandbox,
	"PUT /v1/sandboxes/{name}/budget":                   scopeSandbox,
	"POST /v1/sandboxes/{name}/snapshots":               scopeSandbox,
	"GET /v1/sandboxes/{name}/snapshots":                scopeSandbox,
	"GET /v1/sandboxes/{name}/ssh":                      scopeSandbox,
	"POST /v1/sandboxes/{name}/secrets":                 scopeSandbox,
	"DELETE /v1/sandboxes/{name}/secrets/{secret}":      scopeSandbox,
	"GET /v1/snapshots":                                 scopeList,
	"GET /v1/snapshots/{snapshot}":                      scopeSnapshot,
	"DELETE /v1/snapshots/{snapshot}":                   scopeSnapshot,
	"GET /v1/sessions":                                  scopeList,
	"POST /v1/sessions":                                 scopeList,
	"GET /v1/sessions/{id}":                             scopeSession,
	"DELETE /v1/sessions/{id}":                          scopeSession,
	"POST /v1/sessions/{id}/prompt":                     scopeSession,
	"POST /v1/sessions/{id}/cancel":                     scopeSession,
	"POST /v1/sessions/{id}/permissions/{tool_call_id}": scopeSession,
	"GET /v1/sessions/{id}/events":                      scopeSession,
	"GET /v1/sessions/{id}/stream":                      scopeSession,
	"PUT /v1/sessions/{id}/budget":                      scopeSession,
	"GET /v1/usage":                                     scopeList,

	"POST /v1/secrets":                 scopeSecret,
	"GET /v1/secrets":                  scopeSecret,
	"GET /v1/secrets/{secret}":         scopeSecret,
	"DELETE /v1/secrets/{secret}":      scopeSecret,
	"POST /v1/secrets/{secret}/rotate": scopeSecret,
	"GET /v1/ssh-keys":                 scopeSSHKey,
	"POST /v1/ssh-keys":                scopeSSHKey,
	"DELETE /v1/ssh-keys/{key}":        scopeSSHKey,
	"PUT /v1/logins/{provider}":        scopeLogin,
	"GET /v1/logins":                   scopeLogin,
	"GET /v1/logins/{provider}":        scopeLogin,
	"DELETE /v1/logins/{provider}":     scopeLogin,

	"GET /v1/audit": scopeUser,

	"GET /v1/images":                scopeImage,
	"GET /v1/images/{name}":         scopeImage,
	"DELETE /v1/images/{name}":      scopeImageMutation,
	"POST /v1/images/{name}/build":  scopeImageMutation,
	"POST /v1/images/{name}/import": scopeImageMutation,
	"POST /v1/images/{name}/pull":   scopeImageMutation,
}

// TestEveryRouteHasAnOwner walks the daemon's route table: every route declares a scope, the
// one this test's table gives it, and a path that names a sandbox, a snapshot or a session is
// scoped by it. A route added without an owner decision fails here.
func TestEveryRouteHasAnOwner(t *testing.T) {
	seen := map[string]bool{}
	for _, rt := range (&Daemon{}).routeTable() {
		id := rt.method + " " + rt.pattern
		seen[id] = true
		want, ok := routeScopes[id]
		switch {
		case !ok:
			t.Errorf("%s has no owner decision: add it to routeScopes with the scope it declares", id)
		case rt.scope != want:
			t.Errorf("%s declares scope %q, the table says %q", id, rt.scope, want)
		}
		var named scope
		switch {
		case strings.HasPrefix(rt.pattern, "/v1/sandboxes/{name}"):
			named = scopeSandbox
		case strings.HasPrefix(rt.pattern, "/v1/snapshots/{snapshot}"):
			named = scopeSnapshot
		case strings.HasPrefix(rt.pattern, "/v1/sessions/{id}"):
			named = scopeSession
		}
		if named != "" && rt.scope != named {
			t.Errorf("%s names a %s in its path, but is scoped %q", id, named, rt.scope)
		}
	}
	for id := range routeScopes {
		if !seen[id] {
			t.Errorf("routeScopes has %s, which is no route: remove it", id)
		}
	}
}

// ownersFixture is a daemon with records of the local admin's sandbox "web" (snapshot "snap",
// session "s1") and bob's "mine" (snapshot "keep", session "s2"), serving the real route table
// through the real mux and guards, each handler replaced by a stub that answers the path
// values it was given: what the guard let through, and as what.
func ownersFixture(t *testing.T) (url string, reached *[]string) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, sb := range []store.Sandbox{{ID: "id-web", Name: "web"}, {ID: "id-mine", Name: "bob.mine"}} {
		if err := st.CreateSandbox(sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, sn := range []store.Snapshot{{ID: "sn1", Name: "snap", Sandbox: "web", SandboxID: "id-web"},
		{ID: "sn2", Name: "bob.keep", Sandbox: "bob.mine", SandboxID: "id-mine"}} {
		if err := st.CreateSnapshot(sn); err != nil {
			t.Fatal(err)
		}
	}
	for _, se := range []store.Session{{ID: "s1", Sandbox: "web", SandboxID: "id-web"}, {ID: "s2", Sandbox: "bob.mine", SandboxID: "id-mine"}} {
		if err := st.CreateSession(se); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	d := &Daemon{store: st, log: log}
	reached = &[]string{}
	rows := d.routeTable()
	for i := range rows {
		rows[i].handle = func(w http.ResponseWriter, r *http.Request) error {
			key := r.PathValue("name") + r.PathValue("snapshot") + r.PathValue("id")
			*reached = append(*reached, key)
			return writeJSON(w, http.StatusOK, map[string]string{"key": key})
		}
	}
	srv := httptest.NewServer(asTestUser(newMux(d.guarded(rows), newIdempotency(st, log), log, nil)))
	t.Cleanup(srv.Close)
	return srv.URL, reached
}

// asTestUser serves next as the user the request's Test-User header names, an admin with
// Test-Admin: 1: headers only tests send, where a listener's authentication sets the principal.
func asTestUser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As a listener's authentication does: the user, then an admin's Hiloop-As.
		p, err := withAs(r, identity.Principal{User: r.Header.Get("Test-User"), Admin: r.Header.Get("Test-Admin") == "1"})
		if err != nil {
			writeError(w, slog.New(slog.DiscardHandler), err)
			return
		}
		next.ServeHTTP(w, r.WithContext(identity.With(r.Context(), p)))
	})
}

// ownerCall sends method path as user (an admin when admin), with header Hiloop-As: as when
// as is not empty, and returns the status and the error code or the key the stub was given.
func ownerCall(t *testing.T, base, method, path, user string, admin bool, as string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Test-User", user)
	if admin {
		req.Header.Set("Test-Admin", "1")
	}
	if as != "" {
		req.Header.Set(api.AsHeader, as)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, string(errorCode(t, string(b)))
	}
	var ok struct{ Key string }
	if err := json.Unmarshal(b, &ok); err != nil {
		t.Fatalf("%s %s: %v in %s", method, path, err, b)
	}
	return resp.StatusCode, ok.Key
}

// fill is pattern with its wildcards given: the sandbox, snapshot and session named, and
// placeholders for the rest.
func fill(pattern, sandbox, snapshot, session string) string {
	return strings.NewReplacer("{name}", sandbox, "{snapshot}", snapshot, "{id}", session,
		"{port}", "8080", "{tool_call_id}", "t1", "{secret}", "tok", "{key}", "k", "{provider}", "anthropic").Replace(pattern)
}

// TestOtherUsersResourcesAreNotFound walks the route table as a user who is not an admin: by
// every route, another user's sandbox, snapshot or session is not found, with the code and the
// message shape of one that does not exist, and no handler runs; the user's own are reached,
// as their keys. The admin reaches theirs as bare names, and bob's with Hiloop-As.
func TestOtherUsersResourcesAreNotFound(t *testing.T) {
	base, reached := ownersFixture(t)
	notFound := map[scope]string{
		scopeSandbox:  string(api.CodeSandboxNotFound),
		scopeSnapshot: string(api.CodeSnapshotNotFound),
		scopeSession:  string(api.CodeSessionNotFound),
	}
	ownKey := map[scope]string{scopeSandbox: "bob.mine", scopeSnapshot: "bob.keep", scopeSession: "s2"}
	adminKey := map[scope]string{scopeSandbox: "web", scopeSnapshot: "snap", scopeSession: "s1"}
	for _, rt := range (&Daemon{}).routeTable() {
		code, scoped := notFound[rt.scope]
		if !scoped {
			continue
		}
		// Bob asks for the admin's by their names, and for names no one has.
		for _, path := range []string{fill(rt.pattern, "web", "snap", "s1"), fill(rt.pattern, "nope", "nope", "zz9")} {
			*reached = nil
			status, got := ownerCall(t, base, rt.method, path, "bob", false, "")
			if status != http.StatusNotFound || got != code || len(*reached) != 0 {
				t.Errorf("bob: %s %s = %d %s (handler reached: %v), want 404 %s", rt.method, path, status, got, *reached, code)
			}
		}
		// Nor can he spell a key: a name holds no '.'.
		if rt.scope != scopeSession {
			path := fill(rt.pattern, "bob.mine", "bob.keep", "")
			if status, got := ownerCall(t, base, rt.method, path, "admin", true, ""); status == http.StatusOK {
				t.Errorf("admin: %s %s reached %q: a key is not a name", rt.method, path, got)
			}
		}
		own := fill(rt.pattern, "mine", "keep", "s2")
		if status, got := ownerCall(t, base, rt.method, own, "bob", false, ""); status != http.StatusOK || got != ownKey[rt.scope] {
			t.Errorf("bob: %s %s = %d %s, want his own %s", rt.method, own, status, got, ownKey[rt.scope])
		}
		if status, got := ownerCall(t, base, rt.method, own, "admin", true, "bob"); status != http.StatusOK || got != ownKey[rt.scope] {
			t.Errorf("admin as bob: %s %s = %d %s, want bob's %s", rt.method, own, status, got, ownKey[rt.scope])
		}
		admins := fill(rt.pattern, "web", "snap", "s1")
		if status, got := ownerCall(t, base, rt.method, admins, "admin", true, ""); status != http.StatusOK || got != adminKey[rt.scope] {
			t.Errorf("admin: %s %s = %d %s, want %s", rt.method, admins, status, got, adminKey[rt.scope])
		}
		if status, got := ownerCall(t, base, rt.method, admins, "admin", true, "bob"); status != http.StatusNotFound || got != code {
			t.Errorf("admin as bob: %s %s = %d %s, want 404 %s: the admin's own are not bob's", rt.method, admins, status, got, code)
		}
	}
}

// The message of another user's resource is that of one that does not exist.
func TestNotFoundSaysNoMore(t *testing.T) {
	base, _ := ownersFixture(t)
	for _, tc := range []struct{ theirs, none string }{
		{"/v1/sandboxes/web", "/v1/sandboxes/wob"},
		{"/v1/snapshots/snap", "/v1/snapshots/snop"},
		{"/v1/sessions/s1", "/v1/sessions/s9"},
	} {
		theirs := errorBody(t, base, tc.theirs, "bob")
		none := errorBody(t, base, tc.none, "bob")
		if strings.NewReplacer("wob", "web", "snop", "snap", "s9", "s1").Replace(none) != theirs {
			t.Errorf("another's %s answers %s; one that does not exist %s", tc.theirs, theirs, none)
		}
	}
}

func errorBody(t *testing.T, base, path, user string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Test-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestAdminOnlyScopes: a user who is not an admin is refused image mutations, admin routes,
// all_users and Hiloop-As, with forbidden; reaches the public, image catalog and list routes;
// and the admin reaches every one.
func TestAdminOnlyScopes(t *testing.T) {
	base, _ := ownersFixture(t)
	for _, rt := range (&Daemon{}).routeTable() {
		path := fill(rt.pattern, "base", "snap", "s1")
		switch rt.scope {
		case scopeImageMutation, scopeUser:
			if status, got := ownerCall(t, base, rt.method, path, "bob", false, ""); status != http.StatusForbidden || got != string(api.CodeForbidden) {
				t.Errorf("bob: %s %s = %d %s, want 403 forbidden", rt.method, path, status, got)
			}
			if status, got := ownerCall(t, base, rt.method, path, "admin", true, ""); status != http.StatusOK {
				t.Errorf("admin: %s %s = %d %s", rt.method, path, status, got)
			}
		case scopePublic, scopeImage, scopeList, scopeSecret, scopeSSHKey, scopeLogin:
			if status, got := ownerCall(t, base, rt.method, path, "bob", false, ""); status != http.StatusOK {
				t.Errorf("bob: %s %s = %d %s", rt.method, path, status, got)
			}
		}
		if rt.scope == scopeList {
			all := path + "?all_users=true"
			if status, got := ownerCall(t, base, rt.method, all, "bob", false, ""); status != http.StatusForbidden || got != string(api.CodeForbidden) {
				t.Errorf("bob: %s %s = %d %s, want 403 forbidden", rt.method, all, status, got)
			}
			if status, got := ownerCall(t, base, rt.method, all, "admin", true, ""); status != http.StatusOK {
				t.Errorf("admin: %s %s = %d %s", rt.method, all, status, got)
			}
		}
	}
	for _, tc := range []struct {
		user  string
		admin bool
		as    string
		code  api.ErrorCode
	}{
		{"bob", false, "bob", api.CodeForbidden},
		{"bob", false, "admin", api.CodeForbidden},
		{"admin", true, "Bob", api.CodeInvalidName},
		{"admin", true, "a.b", api.CodeInvalidName},
	} {
		if status, got := ownerCall(t, base, "GET", "/v1/sandboxes", tc.user, tc.admin, tc.as); got != string(tc.code) {
			t.Errorf("%s as %q: %d %s, want %s", tc.user, tc.as, status, got, tc.code)
		}
	}
}

// A request with no principal is refused, whatever it asks.
func TestNoPrincipalIsRefused(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	d := &Daemon{store: st, log: log}
	srv := httptest.NewServer(newMux(d.routes(), newIdempotency(st, log), log, nil))
	t.Cleanup(srv.Close)
	if code := call(t, "GET", srv.URL+"/v1/version", "", &api.VersionInfo{}); code != api.CodeUnauthorized {
		t.Errorf("no principal: %q, want unauthorized", code)
	}
}

// Answers show a key's bare name and its owner.
func TestPresent(t *testing.T) {
	if sb := present(api.Sandbox{Name: "bob.web"}); sb.Name != "web" || sb.Owner != "bob" {
		t.Errorf("present(bob.web) = %s of %s", sb.Name, sb.Owner)
	}
	if sb := present(api.Sandbox{Name: "web"}); sb.Name != "web" || sb.Owner != identity.LocalAdmin {
		t.Errorf("present(web) = %s of %s", sb.Name, sb.Owner)
	}
	if sn := presentSnapshot(api.Snapshot{Name: "bob.s", Sandbox: "bob.web"}); sn.Name != "s" || sn.Sandbox != "web" || sn.Owner != "bob" {
		t.Errorf("presentSnapshot = %+v", sn)
	}
	if se := presentSession(api.Session{ID: "x", Sandbox: "bob.web"}); se.Sandbox != "web" || se.Owner != "bob" {
		t.Errorf("presentSession = %+v", se)
	}
}

// A request refused by its guard closes what the client handed off with it (here an exec's
// stdout) at once, though the client keeps the connection open: the handler that would have
// taken it never runs.
func TestRefusalClosesTheHandoff(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateSandbox(store.Sandbox{ID: "id-web", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	d := &Daemon{store: st, log: log}
	sock := filepath.Join(t.TempDir(), "s")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	bob := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(identity.With(r.Context(), identity.Principal{User: "bob"})))
		})
	}
	srv := &http.Server{Handler: bob(newMux(d.routes(), newIdempotency(st, log), log, nil)), ConnContext: withConn}
	go srv.Serve(handoff.Listen(uln))
	t.Cleanup(func() { srv.Close() })

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /v1/sandboxes/web/exec HTTP/1.1\r\nHost: unix\r\n" + api.ExecHandoffHeader + ": 1\r\n\r\n"
	if _, err := handoff.Send(c, []*os.File{pw}).Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob's exec in the admin's web: %d, want 404", resp.StatusCode)
	}
	pw.Close() // the client's own copy: the daemon's must be closed already
	if err := pr.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := pr.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read the handed-off pipe: %d, %v; want EOF: the daemon still holds its end", n, err)
	}
}
