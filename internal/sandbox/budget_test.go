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

	// 30 + 10 GiB: fits.
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "a", Image: "minimal", WorkspaceGiB: 30, NoStart: true})
	// 40 + 10 more would be 90 GiB promised.
	p := api.SandboxesPost{Name: "b", Image: "minimal", WorkspaceGiB: 40, NoStart: true}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	_, err := f.Create(ctx, p)
	if !isCode(err, api.CodeInsufficientStorage) {
		t.Fatalf("create over the budget: %v, want insufficient_storage", err)
	}
	for _, want := range []string{`create sandbox "b"`, "asks for 50 GiB more", "40 GiB is promised already", "can keep 54 GiB (50 GiB free + 4 GiB held", "overcommit 1)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if f.Exists("b") || len(f.vol.vols) != 1 {
		t.Fatalf("a refused create left a record (%v) or volumes %v", f.Exists("b"), f.vol.vols)
	}
	// A small one fits in what is left; its root filesystem counts too.
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "c", Image: "minimal", WorkspaceGiB: 2, RootfsGiB: 2, NoStart: true})
	p = api.SandboxesPost{Name: "d", Image: "minimal", WorkspaceGiB: 1, RootfsGiB: 10, NoStart: true}
	_ = p.Normalize()
	if _, err := f.Create(ctx, p); !isCode(err, api.CodeInsufficientStorage) {
		t.Fatalf("create whose root filesystem is over the budget: %v", err)
	}

	// Grow asks for the difference only: 44 GiB promised, 10 more fill the 54 exactly.
	if _, err := f.Grow(ctx, "a", 41); !isCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "asks for 11 GiB more") {
		t.Fatalf("grow over the budget: %v", err)
	}
	if _, err := f.Grow(ctx, "a", 40); err != nil {
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

// An ephemeral workspace is made at every start: a start is refused once the room promised to
// it is gone.
func TestStorageBudgetEphemeralStart(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	f.SetBudget(1, fakePool{free: 50 * gib})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "e", Image: "minimal", StorageClass: api.StorageEphemeral, NoStart: true})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "d", Image: "minimal", NoStart: true})
	f.SetBudget(1, fakePool{free: 30 * gib})
	if _, err := f.Start(ctx, "e"); !isCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "ephemeral workspace") {
		t.Fatalf("ephemeral start over the budget: %v", err)
	}
	// A durable workspace exists already: its start takes nothing new.
	if _, err := f.Start(ctx, "d"); err != nil {
		t.Fatalf("durable start: %v", err)
	}
}
