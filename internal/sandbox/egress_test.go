package sandbox

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// fakeEgress counts attaches, policy changes and detaches in the manager's call log, and keeps
// the policy each attached sandbox is served under.
type fakeEgress struct {
	log      *callLog
	mu       sync.Mutex
	policies map[string]api.Egress // by sandbox id, while attached
	prepared map[string]bool       // by sandbox id: a capture made ahead, not yet attached
}

func newFakeEgress(log *callLog) *fakeEgress {
	return &fakeEgress{log: log, policies: map[string]api.Egress{}, prepared: map[string]bool{}}
}

func (e *fakeEgress) Prepare(_ context.Context, id string) error {
	if err := e.log.call("egress.Prepare"); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.prepared[id] = true
	return nil
}

func (e *fakeEgress) Attach(_ context.Context, id, _ string, p api.Egress) error {
	if err := e.log.call("egress.Attach"); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.policies[id] = p
	delete(e.prepared, id)
	return nil
}

func (e *fakeEgress) SetPolicy(id string, p api.Egress) error {
	if err := e.log.call("egress.SetPolicy"); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.policies[id]; ok {
		e.policies[id] = p
	}
	return nil
}

func (e *fakeEgress) Detach(id string) {
	_ = e.log.call("egress.Detach")
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.policies, id)
	delete(e.prepared, id)
}

func (e *fakeEgress) Env(id string) []string {
	return []string{"HTTP_PROXY=gw", "NO_PROXY=lo", "SANDBOX_ID=" + id}
}
func (e *fakeEgress) Nameserver() string { return "127.0.0.9" }
func (e *fakeEgress) CACerts() []byte    { return []byte(fakeCA) }

const fakeCA = "-----BEGIN CERTIFICATE-----\nfake egress CA\n-----END CERTIFICATE-----\n"

// policy returns the policy the sandbox id is served under, and whether it is attached.
func (e *fakeEgress) policy(id string) (api.Egress, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.policies[id]
	return p, ok
}

func TestEgressFollowsTheSandbox(t *testing.T) {
	f := newFakeManager(t)
	f.SetEgress(newFakeEgress(f.calls))
	ctx := context.Background()
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal"})
	if got := f.calls.take(); got["runtime.Start"] != 1 || got["egress.Attach"] != 1 {
		t.Fatalf("create: calls %v, want one start and one attach", got)
	}
	if f.rt.lastSpec.Nameserver != "127.0.0.9" {
		t.Errorf("runtime started with nameserver %q, want the egress's", f.rt.lastSpec.Nameserver)
	}
	if string(f.rt.lastSpec.ExtraCAs) != fakeCA {
		t.Errorf("runtime started trusting %q, want the egress's CA", f.rt.lastSpec.ExtraCAs)
	}

	if _, err := f.Exec(ctx, "web", runtime.ExecSpec{Argv: []string{"true"}, Env: []string{"HTTP_PROXY=mine"}}); err != nil {
		t.Fatal(err)
	}
	// The caller's HTTP_PROXY comes after the egress's, so it wins.
	// The env is the sandbox's own (the daemon's adds its secrets' placeholders to it).
	sb, err := f.Get(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"HTTP_PROXY=gw", "NO_PROXY=lo", "SANDBOX_ID=" + sb.ID, "HTTP_PROXY=mine"}; !slices.Equal(f.rt.lastExec.Env, want) {
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
	f.SetEgress(newFakeEgress(f.calls))
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

// A sandbox's egress policy is stored with it, handed to the egress at every attach, changed
// live while it runs and kept while it is stopped; a record from before policies is open.
func TestEgressPolicy(t *testing.T) {
	f := newFakeManager(t)
	eg := newFakeEgress(f.calls)
	f.SetEgress(eg)
	ctx := context.Background()
	closed := api.Egress{Mode: api.EgressClosed, Allow: []string{"api.example.test"}}
	sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal", Egress: &closed})
	if !reflect.DeepEqual(sb.Egress, closed) {
		t.Errorf("created with %+v, want %+v", sb.Egress, closed)
	}
	if got, ok := eg.policy(sb.ID); !ok || !reflect.DeepEqual(got, closed) {
		t.Fatalf("attached with %+v (%v), want %+v", got, ok, closed)
	}

	// A live change reaches the egress at once and is stored.
	wider := api.Egress{Mode: api.EgressClosed, Allow: []string{"api.example.test", "other.example.test"}}
	f.calls.take()
	if sb, err := f.SetEgressPolicy(ctx, "web", wider); err != nil || !reflect.DeepEqual(sb.Egress, wider) {
		t.Fatalf("SetEgressPolicy: %+v, %v", sb.Egress, err)
	}
	if got, _ := eg.policy(sb.ID); !reflect.DeepEqual(got, wider) {
		t.Errorf("served under %+v after the change, want %+v", got, wider)
	}
	if got, err := f.Get(ctx, "web"); err != nil || !reflect.DeepEqual(got.Egress, wider) {
		t.Errorf("get: %+v, %v", got.Egress, err)
	}

	// A failed live change changes nothing.
	f.calls.failNext("egress.SetPolicy", errors.New("gateway gone"))
	if _, err := f.SetEgressPolicy(ctx, "web", api.Egress{Mode: api.EgressOpen}); err == nil {
		t.Fatal("a failed live change succeeded")
	}
	f.calls.failNext("egress.SetPolicy", nil)
	if got, _ := f.Get(ctx, "web"); !reflect.DeepEqual(got.Egress, wider) {
		t.Errorf("after a failed change: %+v, want %+v", got.Egress, wider)
	}

	// A stopped sandbox's change waits for its next start.
	if _, err := f.Stop(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	open := api.Egress{Mode: api.EgressOpen, Deny: []string{"*.example.test"}}
	f.calls.take()
	if _, err := f.SetEgressPolicy(ctx, "web", open); err != nil {
		t.Fatal(err)
	}
	if got := f.calls.take(); got["egress.SetPolicy"] != 0 {
		t.Errorf("a stopped sandbox's change reached the egress: %v", got)
	}
	if _, err := f.Start(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if got, _ := eg.policy(sb.ID); !reflect.DeepEqual(got, open) {
		t.Errorf("started under %+v, want %+v", got, open)
	}

	// A daemon restart attaches the running sandbox under its stored policy.
	eg2 := newFakeEgress(f.calls)
	f.SetEgress(eg2)
	if err := f.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := eg2.policy(sb.ID); !ok || !reflect.DeepEqual(got, open) {
		t.Errorf("reconciled under %+v (%v), want %+v", got, ok, open)
	}

	// A sandbox with no policy is open.
	plain := mustCreate(t, f.Manager, api.SandboxesPost{Name: "plain", Image: "minimal"})
	if want := (api.Egress{Mode: api.EgressOpen}); !reflect.DeepEqual(plain.Egress, want) {
		t.Errorf("no policy: %+v, want %+v", plain.Egress, want)
	}
	if got, _ := eg2.policy(plain.ID); got.Mode != api.EgressOpen {
		t.Errorf("no policy: attached with %+v", got)
	}

	if _, err := f.SetEgressPolicy(ctx, "nope", open); !isCode(err, api.CodeSandboxNotFound) {
		t.Errorf("unknown sandbox: %v", err)
	}
}

// An exec gets the defaults of the image build its sandbox started from: a rebuild reaches the
// sandbox at its next start, also across a daemon restart in between.
func TestExecKeepsTheStartedBuildsDefaults(t *testing.T) {
	f := newFakeManager(t)
	ctx := context.Background()
	imgs := &switchImages{build: images.Image{Path: "/images/minimal/rootfs-1", Env: []string{"GREETING=one"}, WorkDir: "/srv/one"}}
	f.images = imgs
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal"})
	imgs.rebuild(images.Image{Path: "/images/minimal/rootfs-2", Env: []string{"GREETING=two"}})

	exec := func(spec runtime.ExecSpec) runtime.ExecSpec {
		t.Helper()
		if _, err := f.Exec(ctx, "web", spec); err != nil {
			t.Fatal(err)
		}
		return f.rt.lastExec
	}
	got := exec(runtime.ExecSpec{Argv: []string{"true"}, Env: []string{"MINE=1"}})
	if want := []string{"GREETING=one", "MINE=1"}; !slices.Equal(got.Env, want) || got.Dir != "/srv/one" {
		t.Errorf("exec after a rebuild: env %q dir %q, want %q in /srv/one (the started build's)", got.Env, got.Dir, want)
	}
	if err := f.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := exec(runtime.ExecSpec{Argv: []string{"true"}, Dir: "/tmp"}); !slices.Equal(got.Env, []string{"GREETING=one"}) || got.Dir != "/tmp" {
		t.Errorf("exec after a reconcile: env %q dir %q, want the started build's env in the asked /tmp", got.Env, got.Dir)
	}

	if _, err := f.Stop(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Start(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	got = exec(runtime.ExecSpec{Argv: []string{"true"}})
	if !slices.Equal(got.Env, []string{"GREETING=two"}) || got.Dir != api.DefaultExecWorkDir {
		t.Errorf("exec after a restart: env %q dir %q, want the new build's env in %s", got.Env, got.Dir, api.DefaultExecWorkDir)
	}
}
