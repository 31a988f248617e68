package daemon

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/secrets"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// TestSecretEnvAndBindings follows one secret through attach, rotate, detach and delete as a
// sandbox's processes (the env) and the gateway (the bindings) see it.
func TestSecretEnvAndBindings(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := secrets.Open(db.Owned("internal/secrets"), filepath.Join(dir, "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	p := api.SecretsPost{Name: "api-key", Hosts: []string{"api.example.test"}, Header: "x-api-key", Format: "Bearer {value}", PathPrefix: "/v1/", Value: "one"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(identity.LocalAdmin, p, time.Now()); err != nil {
		t.Fatal(err)
	}
	logged := 0
	lookup := secretBindings(st, "id1", func(string, ...any) { logged++ })
	if env, _ := secretEnv(st, "id1"); len(env) != 0 || len(lookup("api.example.test")) != 0 {
		t.Fatalf("before attach: env %q", env)
	}
	if err := st.Attach("id1", "box", []api.SecretAttachment{{Secret: "api-key", Env: "API_KEY"}}); err != nil {
		t.Fatal(err)
	}
	env, err := secretEnv(st, "id1")
	if err != nil || len(env) != 1 || !strings.HasPrefix(env[0], "API_KEY="+secrets.PlaceholderPrefix) {
		t.Fatalf("env %q %v", env, err)
	}
	placeholder := strings.TrimPrefix(env[0], "API_KEY=")
	bs := lookup("api.example.test")
	if len(bs) != 1 {
		t.Fatalf("bindings %+v", bs)
	}
	b := bs[0]
	if b.Name != "api-key" || b.Header != "x-api-key" || b.Format != "Bearer {value}" || b.PathPrefix != "/v1/" ||
		!slices.Equal(b.Hosts, []string{"api.example.test"}) || b.Placeholder != placeholder {
		t.Fatalf("binding %+v", b)
	}
	if v := b.Value(); string(v) != "one" {
		t.Fatalf("value %q", v)
	}
	// A rotation reaches a binding already handed out, at its next request.
	if _, err := st.Rotate(identity.LocalAdmin, "api-key", "two", time.Now()); err != nil {
		t.Fatal(err)
	}
	if v := b.Value(); string(v) != "two" {
		t.Fatalf("value after rotate %q", v)
	}
	// Another sandbox's lookup knows nothing of it.
	if other := secretBindings(st, "id2", nil)("api.example.test"); len(other) != 0 {
		t.Fatalf("id2 bindings %+v", other)
	}
	// After detach the env lacks it and the binding handed out before is worthless.
	if _, err := st.Detach("id1", "api-key"); err != nil {
		t.Fatal(err)
	}
	if env, _ := secretEnv(st, "id1"); len(env) != 0 {
		t.Fatalf("env after detach %q", env)
	}
	if v := b.Value(); v != nil {
		t.Fatalf("a detached binding still gives %q", v)
	}
	if len(lookup("api.example.test")) != 0 {
		t.Fatal("bindings after detach")
	}
	// Re-attached, then deleted: the same.
	if err := st.Attach("id1", "box", []api.SecretAttachment{{Secret: "api-key", Env: "API_KEY"}}); err != nil {
		t.Fatal(err)
	}
	b = lookup("api.example.test")[0]
	if b.Placeholder == placeholder {
		t.Fatal("a re-attached secret kept the placeholder of its detached attachment")
	}
	if _, err := st.Delete(identity.LocalAdmin, "api-key"); err != nil {
		t.Fatal(err)
	}
	if v := b.Value(); v != nil || len(lookup("api.example.test")) != 0 {
		t.Fatalf("after delete: value %q", v)
	}
	if logged != 0 {
		t.Fatalf("%d errors logged", logged)
	}
}
