package sandbox

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// roomFor is a host budget with room for n running sandboxes; it records what it was asked.
type roomFor struct {
	n     int
	mu    sync.Mutex
	asked []int
}

func (b *roomFor) AdmitStart(running int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, running)
	if running >= b.n {
		return api.Errorf(api.CodeHostLimitReached, "room for %d", b.n)
	}
	return nil
}

// Starts and creates are admitted against the running sandboxes; a refused start leaves its
// sandbox stopped, a refused create leaves nothing, and a stop makes room again.
func TestHostBudgetAdmitsStarts(t *testing.T) {
	f := newFakeManager(t)
	budget := &roomFor{n: 2}
	f.SetHostBudget(budget)
	ctx := context.Background()
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "a", Image: "minimal"})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "b", Image: "minimal", NoStart: true})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "c", Image: "minimal", NoStart: true})
	if _, err := f.Start(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	_, err := f.Start(ctx, "c")
	wantCode(t, err, api.CodeHostLimitReached)
	if sb, err := f.Get(ctx, "c"); err != nil || sb.State != api.StateStopped {
		t.Errorf("refused start left c %s (%v), want stopped", sb.State, err)
	}
	p := api.SandboxesPost{Name: "d", Image: "minimal"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	_, err = f.Create(ctx, p)
	wantCode(t, err, api.CodeHostLimitReached)
	if f.Exists("d") {
		t.Error("a refused create left its sandbox")
	}
	// Starting a running sandbox takes no new room.
	if _, err := f.Start(ctx, "a"); err != nil {
		t.Errorf("start of a running sandbox at the limit: %v", err)
	}
	if _, err := f.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Start(ctx, "c"); err != nil {
		t.Errorf("start after a stop made room: %v", err)
	}
	// A create that starts is weighed at its record and again at its start: a's create asks
	// twice, d's refused create once.
	want := fmt.Sprint([]int{0, 0, 1, 2, 2, 1})
	if got := fmt.Sprint(budget.asked); got != want {
		t.Errorf("the budget was asked with %s running, want %s", got, want)
	}
}

// A list glances at every init and pings none (a ping wakes the init); what the glance finds
// shows: a running sandbox whose init is stopped stays running, marked unresponsive, and one
// whose init is gone is failed.
func TestListGlancesWithoutPinging(t *testing.T) {
	f := newFakeManager(t)
	slow := mustCreate(t, f.Manager, api.SandboxesPost{Name: "slow", Image: "minimal"})
	dead := mustCreate(t, f.Manager, api.SandboxesPost{Name: "dead", Image: "minimal"})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "ok", Image: "minimal"})
	f.rt.setRunning(dead.ID, false)
	f.rt.glance = func(id string) runtime.Liveness {
		if id == slow.ID {
			return runtime.Unresponsive
		}
		return runtime.Answering
	}
	before := f.rt.probes.Load()
	list, err := f.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := f.rt.probes.Load() - before; n != 0 {
		t.Errorf("a list pinged %d inits", n)
	}
	got := map[string]string{}
	for _, sb := range list {
		got[sb.Name] = fmt.Sprintf("%s unresponsive=%v", sb.State, sb.Unresponsive)
	}
	want := map[string]string{"dead": "failed unresponsive=false", "ok": "running unresponsive=false", "slow": "running unresponsive=true"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("list = %v, want %v", got, want)
	}
}

// A get pings the init, within probeTimeout: one that does not answer in time stays running,
// marked unresponsive, whatever a glance would say.
func TestGetPingsTheInit(t *testing.T) {
	f := newFakeManager(t)
	slow := mustCreate(t, f.Manager, api.SandboxesPost{Name: "slow", Image: "minimal"})
	f.rt.probe = func(ctx context.Context, id string) runtime.Liveness {
		<-ctx.Done()
		return runtime.Unresponsive
	}
	before := f.rt.probes.Load()
	sb, err := f.Get(context.Background(), "slow")
	if err != nil {
		t.Fatal(err)
	}
	if n := f.rt.probes.Load() - before; n != 1 || sb.ID != slow.ID || sb.State != api.StateRunning || !sb.Unresponsive {
		t.Errorf("get after %d pings: %s unresponsive=%v, want one ping and running unresponsive", n, sb.State, sb.Unresponsive)
	}
}
