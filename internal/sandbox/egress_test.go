package sandbox

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// fakeEgress counts attaches and detaches in the manager's call log.
type fakeEgress struct{ log *callLog }

func (e fakeEgress) Attach(context.Context, string, string) error { return e.log.call("egress.Attach") }
func (e fakeEgress) Detach(string)                                { _ = e.log.call("egress.Detach") }
func (e fakeEgress) Env() []string                                { return []string{"HTTP_PROXY=gw", "NO_PROXY=lo"} }
func (e fakeEgress) Nameserver() string                           { return "127.0.0.9" }

func TestEgressFollowsTheSandbox(t *testing.T) {
	f := newFakeManager(t)
	f.SetEgress(fakeEgress{f.calls})
	ctx := context.Background()
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal"})
	if got := f.calls.take(); got["runtime.Start"] != 1 || got["egress.Attach"] != 1 {
		t.Fatalf("create: calls %v, want one start and one attach", got)
	}
	if f.rt.lastSpec.Nameserver != "127.0.0.9" {
		t.Errorf("runtime started with nameserver %q, want the egress's", f.rt.lastSpec.Nameserver)
	}

	if _, err := f.Exec(ctx, "web", runtime.ExecSpec{Argv: []string{"true"}, Env: []string{"HTTP_PROXY=mine"}}); err != nil {
		t.Fatal(err)
	}
	// The caller's HTTP_PROXY comes after the egress's, so it wins.
	if want := []string{"HTTP_PROXY=gw", "NO_PROXY=lo", "HTTP_PROXY=mine"}; !slices.Equal(f.rt.lastExec.Env, want) {
		t.Errorf("exec env = %q, want %q", f.rt.lastExec.Env, want)
	}

	if _, err := f.Stop(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if got := f.calls.take(); got["egress.Detach"] != 1 || got["runtime.Stop"] != 1 {
		t.Fatalf("stop: calls %v, want one detach and one runtime stop", got)
	}

	// A sandbox still running when the daemon starts again gets its egress back, unrestarted.
	if _, err := f.Start(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	f.calls.take()
	if err := f.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.calls.take(); got["egress.Attach"] != 1 || got["runtime.Start"] != 0 {
		t.Fatalf("reconcile of a running sandbox: calls %v, want one attach and no start", got)
	}

	if err := f.Delete(ctx, "web", false); err != nil {
		t.Fatal(err)
	}
	if got := f.calls.take(); got["egress.Detach"] < 1 {
		t.Fatalf("delete: calls %v, want a detach", got)
	}
}

// A sandbox whose egress cannot be served does not run: it would have no way out, and a client
// would not know why.
func TestStartFailsWhenEgressCannotAttach(t *testing.T) {
	f := newFakeManager(t)
	f.SetEgress(fakeEgress{f.calls})
	ctx := context.Background()
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal", NoStart: true})
	f.calls.take()
	f.calls.failNext("egress.Attach", errors.New("no nftables"))
	if _, err := f.Start(ctx, "web"); err == nil {
		t.Fatal("start succeeded without egress")
	}
	got := f.calls.take()
	if got["egress.Attach"] != 1 || got["egress.Detach"] != 1 || got["runtime.Stop"] != 1 {
		t.Errorf("failed start: calls %v, want the container stopped and the egress detached", got)
	}
	sb, err := f.Get(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateFailed || f.rt.Running(sb.ID) {
		t.Errorf("state %s, running %v; want failed and not running", sb.State, f.rt.Running(sb.ID))
	}
}
