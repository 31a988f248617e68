package sandbox

import (
	"context"
	"testing"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// A create, grow or snapshot whose effect was stored and whose receipt a crash lost is retried
// with its key (the same store.Call): the retry finds what its call made and answers with it,
// while any other call finds the name taken or the size reached, as before.
func TestRetryOfACallFindsItsEffect(t *testing.T) {
	f := newFakeManager(t)
	bg := context.Background()
	call := func(c string) context.Context { return store.WithCall(bg, store.Call(c)) }
	p := api.SandboxesPost{Name: "web", Image: "minimal"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}

	sb, err := f.Create(call("create"), p)
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.Create(call("create"), p)
	if err != nil || again.ID != sb.ID || again.State != api.StateRunning {
		t.Fatalf("create retried with its call: %s %s, %v; want %s running", again.ID, again.State, err, sb.ID)
	}
	_, err = f.Create(call("other"), p)
	wantCode(t, err, api.CodeSandboxExists)
	_, err = f.Create(bg, p)
	wantCode(t, err, api.CodeSandboxExists)

	to := sb.Workspace.CapacityBytes/gib + 1
	if _, err := f.Grow(call("grow"), "web", int(to)); err != nil {
		t.Fatal(err)
	}
	grown, err := f.Grow(call("grow"), "web", int(to))
	if err != nil || grown.Workspace.CapacityBytes != to*gib {
		t.Fatalf("grow retried with its call: %d bytes, %v; want %d GiB", grown.Workspace.CapacityBytes, err, to)
	}
	_, err = f.Grow(call("other"), "web", int(to))
	wantCode(t, err, api.CodeGrowNotLarger)

	sn, err := f.Snapshot(call("snap"), "web", api.SnapshotsPost{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	snAgain, err := f.Snapshot(call("snap"), "web", api.SnapshotsPost{Name: "s"})
	if err != nil || snAgain.ID != sn.ID || snAgain.State != api.SnapshotReady {
		t.Fatalf("snapshot retried with its call: %s %s, %v; want %s ready", snAgain.ID, snAgain.State, err, sn.ID)
	}
	_, err = f.Snapshot(call("other"), "web", api.SnapshotsPost{Name: "s"})
	wantCode(t, err, api.CodeSnapshotExists)
	_, err = f.Snapshot(bg, "web", api.SnapshotsPost{Name: "s"})
	wantCode(t, err, api.CodeSnapshotExists)
}

// A grow that a crash cut short after the workspace grew and before the record did is finished
// by its retry, which finds the workspace at the size it asks and answers it; after that, the
// size is reached for every other call.
func TestRetryFinishesAGrowCutShortAfterTheWorkspaceGrew(t *testing.T) {
	f := newFakeManager(t)
	ctx := store.WithCall(context.Background(), "grow")
	sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal"})
	to := int(sb.Workspace.CapacityBytes/gib) + 1
	if _, err := f.vol.Grow(ctx, sb.ID, to); err != nil {
		t.Fatal(err)
	}
	grown, err := f.Grow(ctx, "web", to)
	if err != nil || grown.Workspace.CapacityBytes != int64(to)*gib {
		t.Fatalf("the retried grow: %d bytes, %v; want %d GiB", grown.Workspace.CapacityBytes, err, to)
	}
	if rec, err := f.store.GetSandbox("web"); err != nil || rec.WorkspaceGiB != to {
		t.Fatalf("the record says %d GiB (%v), want %d", rec.WorkspaceGiB, err, to)
	}
	_, err = f.Grow(store.WithCall(context.Background(), "other"), "web", to)
	wantCode(t, err, api.CodeGrowNotLarger)
}
