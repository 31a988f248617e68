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
	want := fmt.Sprint([]int{0, 1, 2, 2, 1})
	if got := fmt.Sprint(budget.asked); got != want {
		t.Errorf("the budget was asked with %s running, want %s", got, want)
	}
}

// List pings every running sandbox at once: each fake init here answers only once all of them
// are being pinged, so a list that pinged them in turn would see them all unresponsive.
func TestListProbesInParallel(t *testing.T) {
	f := newFakeManager(t)
	names := []string{"a", "b", "c"}
	for _, n := range names {
		mustCreate(t, f.Manager, api.SandboxesPost{Name: n, Image: "minimal"})
	}
	var all sync.WaitGroup
	all.Add(len(names))
	inFlight := make(chan struct{})
	go func() { all.Wait(); close(inFlight) }()
	f.rt.probe = func(ctx context.Context, _ string) runtime.Liveness {
		all.Done()
		select {
		case <-inFlight:
			return runtime.Answering
		case <-ctx.Done():
			return runtime.Unresponsive
		}
	}
	list, err := f.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, sb := range list {
		if sb.Name != names[i] || sb.State != api.StateRunning || sb.Unresponsive {
			t.Errorf("list[%d] = %s %s unresponsive=%v, want %s running and answering", i, sb.Name, sb.State, sb.Unresponsive, names[i])
		}
	}
}

// A running sandbox whose init does not answer in time stays running, marked unresponsive; one
// whose init is gone is failed.
func TestListUnresponsiveAndGone(t *testing.T) {
	f := newFakeManager(t)
	slow := mustCreate(t, f.Manager, api.SandboxesPost{Name: "slow", Image: "minimal"})
	dead := mustCreate(t, f.Manager, api.SandboxesPost{Name: "dead", Image: "minimal"})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "ok", Image: "minimal"})
	f.rt.setRunning(dead.ID, false)
	f.rt.probe = func(ctx context.Context, id string) runtime.Liveness {
		if id == slow.ID {
			<-ctx.Done()
			return runtime.Unresponsive
		}
		return runtime.Answering
	}
	list, err := f.List(context.Background())
	if err != nil {
		t.Fatal(err)
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
