package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

// The manager works on keys: two users' sandboxes of one name are two sandboxes, each named
// by its bare name inside (its hostname) and in what the manager says of it.
func TestKeysOfTwoNamespaces(t *testing.T) {
	f := newFakeManager(t)
	ctx := context.Background()
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal"})
	p := api.SandboxesPost{Name: "web", Image: "minimal"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	p.Name = "bob.web"
	sb, err := f.Create(ctx, p)
	if err != nil {
		t.Fatalf("bob's web beside the admin's: %v", err)
	}
	if sb.Name != "bob.web" || f.rt.lastSpec.Hostname != "web" || f.rt.lastSpec.ID != sb.ID {
		t.Errorf("bob's web: name %q, hostname %q", sb.Name, f.rt.lastSpec.Hostname)
	}
	if _, err := f.Create(ctx, p); !isCode(err, api.CodeSandboxExists) || strings.Contains(err.Error(), "bob") {
		t.Errorf("bob's second web: %v, want sandbox_exists naming web alone", err)
	}
	if _, err := f.Stop(ctx, "bob.web"); err != nil {
		t.Fatal(err)
	}
	if err := f.CheckExec("bob.web"); !isCode(err, api.CodeSandboxNotRunning) || err.Error() != "sandbox \"web\" is stopped: start it with `hiloop sandbox start web`" {
		t.Errorf("exec in bob's stopped web: %v", err)
	}
	if _, err := f.Get(ctx, "bob.nope"); !isCode(err, api.CodeSandboxNotFound) || err.Error() != `sandbox "nope" not found` {
		t.Errorf("bob's nope: %v", err)
	}
	list, err := f.List(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("list: %d sandboxes, %v; want both webs", len(list), err)
	}
}
