package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

// fakePool is a pool with fixed free and held room.
type fakePool struct{ free, held int64 }

func (p fakePool) FreeBytes() (int64, error) { return p.free, nil }
func (p fakePool) HeldBytes() (int64, error) { return p.held, nil }

// The budget counts every sandbox's workspace and root filesystem and every snapshot's data,
// against the smallest free room plus what the pools hold, times the overcommit.
func TestStorageBudget(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	// 50 GiB free in the tighter pool, 4 GiB held in all: 54 GiB to keep.
	f.SetBudget(1, fakePool{free: 60 * gib, held: 3 * gib}, fakePool{free: 50 * gib, held: 1 * gib})

	// 30 GiB of workspace: fits. A stopped sandbox promises no root filesystem.
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "a", Image: "minimal", WorkspaceGiB: 30, NoStart: true})
	// 40 more would be 70 GiB promised.
	p := api.SandboxesPost{Name: "b", Image: "minimal", WorkspaceGiB: 40, NoStart: true}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	_, err := f.Create(ctx, p)
	if !isCode(err, api.CodeInsufficientStorage) {
		t.Fatalf("create over the budget: %v, want insufficient_storage", err)
	}
	for _, want := range []string{`create sandbox "b"`, "asks for 40 GiB more", "30 GiB is promised already", "can keep 54 GiB (50 GiB free + 4 GiB held", "overcommit 1)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if f.Exists("b") || len(f.vol.vols) != 1 {
		t.Fatalf("a refused create left a record (%v) or volumes %v", f.Exists("b"), f.vol.vols)
	}
	// Small ones fit in what is left, whatever their root filesystem limit while stopped; the
	// start of one whose root filesystem does not fit is refused and leaves it stopped.
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "c", Image: "minimal", WorkspaceGiB: 2, NoStart: true})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "d", Image: "minimal", WorkspaceGiB: 1, RootfsGiB: 30, NoStart: true})
	if _, err := f.Start(ctx, "d"); !isCode(err, api.CodeInsufficientStorage) ||
		!strings.Contains(err.Error(), `start sandbox "d": it asks for 30 GiB more, 33 GiB is promised already`) {
		t.Fatalf("start whose root filesystem is over the budget: %v", err)
	}
	if sb, err := f.Get(ctx, "d"); err != nil || sb.State != api.StateStopped {
		t.Fatalf("a refused start left %v (%v), want stopped", sb.State, err)
	}
	// A running sandbox's root filesystem is promised: c's start takes 4 GiB of the 21 left.
	if _, err := f.Start(ctx, "c"); err != nil {
		t.Fatalf("start within the budget: %v", err)
	}

	// Grow asks for the difference only: 37 GiB promised, 17 more fill the 54 exactly, 18 do not.
	if _, err := f.Grow(ctx, "a", 48); !isCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "asks for 18 GiB more") {
		t.Fatalf("grow over the budget: %v", err)
	}
	if _, err := f.Grow(ctx, "a", 47); err != nil {
		t.Fatalf("grow within the budget: %v", err)
	}

	// Overcommitted twice, the refused create fits.
	f.SetBudget(2, fakePool{free: 50 * gib, held: 4 * gib})
	p = api.SandboxesPost{Name: "b", Image: "minimal", WorkspaceGiB: 40, NoStart: true}
	_ = p.Normalize()
	if _, err := f.Create(ctx, p); err != nil {
		t.Fatalf("create within an overcommitted budget: %v", err)
	}
}

// Every start promises its root filesystem; an ephemeral sandbox's also makes its workspace
// again, promised since its create, and says so when the room has gone.
func TestStorageBudgetStart(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	f.SetBudget(1, fakePool{free: 50 * gib})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "e", Image: "minimal", StorageClass: api.StorageEphemeral, NoStart: true})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "d", Image: "minimal", NoStart: true})
	// 20 GiB of workspaces promised; 4 more for a root filesystem do not fit in 22.
	f.SetBudget(1, fakePool{free: 22 * gib})
	if _, err := f.Start(ctx, "e"); !isCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "ephemeral workspace") {
		t.Fatalf("ephemeral start over the budget: %v", err)
	}
	if _, err := f.Start(ctx, "d"); !isCode(err, api.CodeInsufficientStorage) || strings.Contains(err.Error(), "ephemeral") {
		t.Fatalf("durable start over the budget: %v", err)
	}
	// With room for both root filesystems, both start.
	f.SetBudget(1, fakePool{free: 28 * gib})
	for _, name := range []string{"d", "e"} {
		if _, err := f.Start(ctx, name); err != nil {
			t.Fatalf("start %s within the budget: %v", name, err)
		}
	}
}
