package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/internal/volume"
	"github.com/hiloop/hiloop/pkg/api"
)

// Delete tells its listeners the sandbox's name and id once, after the stop listeners and
// outside the sandbox's lock: the session service waits there for turns that may be starting
// the sandbox, which takes that lock.
func TestDeleteNotifiesOutsideTheLock(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "doomed", Image: "minimal"})

	// heard is what the listeners heard, in the order they heard it.
	var (
		mu    sync.Mutex
		heard []string
	)
	hear := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, s)
	}
	f.OnStop(func(name string) { hear("stop " + name) })
	f.OnDelete(func(name, id string) {
		hear("delete " + name + " " + id)
		if _, err := f.Get(ctx, name); !isCode(err, api.CodeSandboxNotFound) {
			hear(fmt.Sprintf("get: %v", err))
		}
		// Start takes the sandbox's lock: called under it, it never returns.
		if _, err := f.Start(ctx, name); !isCode(err, api.CodeSandboxNotFound) {
			hear(fmt.Sprintf("start: %v", err))
		}
	})

	done := make(chan error, 1)
	go func() { done <- f.Delete(ctx, "doomed", false) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Delete: %v", err)
		}
	case <-testenv.Deadline(t):
		t.Fatal("Delete never returned: its listener is waiting for the sandbox's lock")
	}
	wantCode(t, f.Delete(ctx, "doomed", false), api.CodeSandboxNotFound)

	mu.Lock()
	defer mu.Unlock()
	if want := []string{"stop doomed", "delete doomed " + sb.ID}; !slices.Equal(heard, want) {
		t.Fatalf("listeners heard %q, want %q", heard, want)
	}
}

// Stop tells its listeners as it begins, while the sandbox is still running: a session turn
// accepted before the stop learns of it before it could see the sandbox stopped, and so never
// starts it again.
func TestStopNotifiesAsItBegins(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal"})
	f.takeStopped()
	var states []string
	f.OnStop(func(name string) {
		rec, err := f.store.GetSandbox(name)
		states = append(states, fmt.Sprintf("%s %v", rec.State, err))
	})
	if _, err := f.Stop(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"running <nil>"}; !slices.Equal(states, want) {
		t.Fatalf("the listener saw the sandbox %q, want %q", states, want)
	}
}

// busyLayers are root layers whose Drop fails, as a layer with a crashed start's mounts inside
// it did.
type busyLayers struct{ dir string }

func (l busyLayers) Fresh(_ context.Context, id string, _ int) (string, error) {
	return filepath.Join(l.dir, id), nil
}
func (busyLayers) Drop(context.Context, string) error     { return volume.ErrBusy }
func (busyLayers) List(context.Context) ([]string, error) { return nil, nil }

// A root layer that cannot be dropped fails the stop, but does not keep the workspace mounted.
func TestStopReleasesTheWorkspaceWhenTheLayerStaysBusy(t *testing.T) {
	f := newFakeManager(t)
	f.SetLayers(busyLayers{t.TempDir()})
	sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "box", Image: "minimal"})
	if _, err := f.Stop(context.Background(), "box"); !errors.Is(err, volume.ErrBusy) {
		t.Fatalf("stop with a busy layer: %v, want ErrBusy", err)
	}
	f.vol.mu.Lock()
	mounted := f.vol.mounted[sb.ID]
	f.vol.mu.Unlock()
	if mounted {
		t.Error("the workspace stayed mounted because the root layer did")
	}
}
