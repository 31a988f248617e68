package sandbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/internal/volume"
	"github.com/hiloop/hiloop/pkg/api"
)

// pausingXFS is the real xfs driver with a pause at the start of every seal, so a test can act
// while a snapshot has not reached a durable outcome.
type pausingXFS struct {
	*volume.XFS
	sealing chan struct{} // closed when a seal starts
	release chan struct{} // close to let it go on
}

func (p *pausingXFS) Snapshot(ctx context.Context, id, snapID string, progress volume.Progress) (volume.SnapshotInfo, error) {
	close(p.sealing)
	<-p.release
	return p.XFS.Snapshot(ctx, id, snapID, progress)
}

func newTestManager(t *testing.T) (*Manager, *pausingXFS) {
	t.Helper()
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("/tmp", "hlm")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	xfs, err := volume.NewXFS(filepath.Join(dir, "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: the pool goes once every sandbox is deleted.
	t.Cleanup(func() {
		if err := xfs.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		st.Close()
		os.RemoveAll(dir)
	})
	vol := &pausingXFS{XFS: xfs, sealing: make(chan struct{}), release: make(chan struct{})}
	// No container starts in these tests; the runtime is real all the same.
	rt, err := runtime.New(runtime.Config{StateDir: filepath.Join(dir, "rt"), RunDir: filepath.Join(dir, "run"), InitPath: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	imgs := &images.Store{Dir: envOr("HILOOP_TEST_IMAGES", "/var/cache/hiloop-test/images")}
	if _, err := imgs.Build(context.Background(), "minimal", io.Discard); err != nil {
		t.Fatalf("build the test image: %v", err)
	}
	m := NewManager(st, rt, vol, imgs, filepath.Join(dir, "sandboxes"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() {
		ctx := context.Background()
		if list, err := m.List(ctx); err == nil {
			for _, sb := range list {
				if err := m.Delete(ctx, sb.Name, true); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			}
		}
	})
	return m, vol
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func wantCode(t *testing.T, err error, code api.ErrorCode) {
	t.Helper()
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

// While a seal runs, growth and deleting the snapshot answer snapshot_in_progress at once; once
// it is durable both work.
func TestSnapshotInProgress(t *testing.T) {
	m, vol := newTestManager(t)
	ctx := context.Background()
	mustCreate(t, m, api.SandboxesPost{Name: "src", Image: "minimal", NoStart: true, WorkspaceGiB: 1})

	done := make(chan error, 1)
	go func() {
		_, err := m.Snapshot(ctx, "src", api.SnapshotsPost{Name: "s1"})
		done <- err
	}()
	select {
	case <-vol.sealing:
	case <-time.After(10 * time.Second):
		t.Fatal("the seal never started")
	}

	_, err := m.Grow(ctx, "src", 2)
	wantCode(t, err, api.CodeSnapshotInProgress)
	wantCode(t, m.DeleteSnapshot(ctx, "s1"), api.CodeSnapshotInProgress)
	sn, err := m.GetSnapshot("s1")
	if err != nil || sn.State != api.SnapshotSealing {
		t.Fatalf("GetSnapshot while sealing = %+v, %v", sn, err)
	}
	_, err = m.Create(ctx, api.SandboxesPost{Name: "fork", Image: "minimal", StorageClass: api.StorageDurable, FromSnapshot: "s1", NoStart: true})
	wantCode(t, err, api.CodeSnapshotInProgress)

	close(vol.release)
	if err := <-done; err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if sb, err := m.Grow(ctx, "src", 2); err != nil || sb.Workspace.CapacityBytes != 2<<30 {
		t.Fatalf("Grow after the seal = %+v, %v", sb.Workspace, err)
	}
	if err := m.DeleteSnapshot(ctx, "s1"); err != nil {
		t.Fatalf("DeleteSnapshot after the seal: %v", err)
	}
}

// A seal cut short by a crash (its record still "sealing") is removed at the next start, copy
// and record, and a copy with no record goes too.
func TestReconcileRemovesInterruptedSeals(t *testing.T) {
	m, vol := newTestManager(t)
	close(vol.sealing)
	close(vol.release)
	ctx := context.Background()
	sb := mustCreate(t, m, api.SandboxesPost{Name: "src", Image: "minimal", NoStart: true, WorkspaceGiB: 1})
	// What a kill -9 mid-seal leaves: the record says sealing, the copy exists.
	if _, err := vol.XFS.Snapshot(ctx, sb.ID, "cut1", nil); err != nil {
		t.Fatal(err)
	}
	if err := m.store.CreateSnapshot(store.Snapshot{ID: "cut1", Name: "cut", Sandbox: "src", SandboxID: sb.ID, State: string(api.SnapshotSealing)}); err != nil {
		t.Fatal(err)
	}
	// And a copy whose record was never written.
	if _, err := vol.XFS.Snapshot(ctx, sb.ID, "stray1", nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetSnapshot("cut"); !isCode(err, api.CodeSnapshotNotFound) {
		t.Errorf("interrupted seal still recorded: %v", err)
	}
	ids, err := vol.ListSnapshots(ctx)
	if err != nil || len(ids) != 0 {
		t.Errorf("snapshot copies left: %v %v", ids, err)
	}
}

// mustCreate fills p's defaults and creates the sandbox; either failing fails the test.
func mustCreate(t *testing.T, m *Manager, p api.SandboxesPost) api.Sandbox {
	t.Helper()
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	sb, err := m.Create(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func isCode(err error, code api.ErrorCode) bool {
	var apiErr *api.Error
	return errors.As(err, &apiErr) && apiErr.Code == code
}

// A delete --with-snapshots cut short by a crash leaves the sandbox recorded as deleting with
// its whole intent: the next start finishes all of it, its snapshots included, and a sandbox
// that was being deleted without them keeps them.
func TestReconcileFinishesADeleteWithItsSnapshots(t *testing.T) {
	m, vol := newTestManager(t)
	close(vol.release)
	ctx := context.Background()
	for _, name := range []string{"with", "without"} {
		mustCreate(t, m, api.SandboxesPost{Name: name, Image: "minimal", NoStart: true, WorkspaceGiB: 1})
		vol.sealing = make(chan struct{}) // each seal closes it
		if _, err := m.Snapshot(ctx, name, api.SnapshotsPost{Name: name + "-s"}); err != nil {
			t.Fatal(err)
		}
		// What a kill -9 just after the delete recorded its intent leaves.
		if _, err := m.store.UpdateSandbox(name, func(s *store.Sandbox) error {
			s.State = string(api.StateDeleting)
			s.DeleteSnapshots = name == "with"
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"with", "without"} {
		if _, err := m.Get(ctx, name); !isCode(err, api.CodeSandboxNotFound) {
			t.Errorf("sandbox %s after the recovery: %v, want it deleted", name, err)
		}
	}
	if _, err := m.GetSnapshot("with-s"); !isCode(err, api.CodeSnapshotNotFound) {
		t.Errorf("snapshot of the delete --with-snapshots survived the recovery: %v", err)
	}
	if _, err := m.GetSnapshot("without-s"); err != nil {
		t.Errorf("snapshot of the plain delete: %v, want it kept", err)
	}
	if ids, err := vol.ListSnapshots(ctx); err != nil || len(ids) != 1 {
		t.Errorf("snapshot copies after the recovery: %v %v, want the kept one only", ids, err)
	}
	if err := m.DeleteSnapshot(ctx, "without-s"); err != nil {
		t.Fatal(err)
	}
}
