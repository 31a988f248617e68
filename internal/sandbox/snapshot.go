package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/units"
	"github.com/hiloop/hiloop/internal/volume"
	"github.com/hiloop/hiloop/pkg/api"
)

// sealing is a snapshot whose copy is being made.
type sealing struct {
	name        string
	done, total atomic.Int64
}

func (m *Manager) snapshotter() (volume.Snapshotter, error) {
	s, ok := m.volumes.(volume.Snapshotter)
	if !ok {
		return nil, api.Errorf(api.CodeUnsupported, "the %s volume driver cannot snapshot workspaces: run sandboxd with --volume-driver xfs", m.volumes.Name())
	}
	return s, nil
}

// sealingOf returns the snapshot sealing for sandbox id, if one is.
func (m *Manager) sealingOf(id string) *sealing {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seals[id]
}

// Grow grows a sandbox's workspace to sizeGiB, online if it runs. Growth is one-way. The size
// comes from a validated api.GrowPost.
func (m *Manager) Grow(ctx context.Context, name string, sizeGiB int) (api.Sandbox, error) {
	ctx = context.WithoutCancel(ctx)
	rec, err := m.record(name)
	if err != nil {
		return api.Sandbox{}, err
	}
	grower, ok := m.volumes.(volume.Grower)
	if !ok || !m.volumes.Resizable() {
		return api.Sandbox{}, api.Errorf(api.CodeUnsupported, "this deployment's workspaces have a fixed size (%s volume driver): they cannot grow", m.volumes.Name())
	}
	if s := m.sealingOf(rec.ID); s != nil {
		return api.Sandbox{}, snapshotInProgress(s.name)
	}
	defer m.lock(name)()
	if rec, err = m.record(name); err != nil {
		return api.Sandbox{}, err
	}
	if store.CallOf(ctx).Made(rec.Call) {
		return m.view(ctx, rec), nil // a retry of this grow, done before a crash lost its receipt
	}
	current := m.view(ctx, rec).Workspace.CapacityBytes
	if int64(sizeGiB)*gib == current && recordedGiB(rec) < sizeGiB {
		// A grow to this size that a crash cut short after the workspace grew and before the
		// record did: no call was answered for it, so this one (its retry, likely) finishes it.
		return m.recordGrowth(ctx, rec, sizeGiB)
	}
	// Its problems are the one value's, workspace_gib, and say so in their details.
	var ps api.Problems
	if int64(sizeGiB)*gib <= current {
		ps.Addf("workspace_gib", api.CodeGrowNotLarger, "the workspace of %q is already %d GiB: growth is one-way, choose more than that", name, current/gib)
		return api.Sandbox{}, ps.Err()
	}
	if _, err := admit(opGrow, rec); err != nil {
		return api.Sandbox{}, err
	}
	m.budgetMu.Lock()
	defer m.budgetMu.Unlock()
	ps.Add("workspace_gib", m.admitStorage(fmt.Sprintf("grow the workspace of %q to %d GiB", displayName(name), sizeGiB), int64(sizeGiB-recordedGiB(rec))*gib))
	if err := ps.Err(); err != nil {
		return api.Sandbox{}, err
	}
	// An ephemeral workspace that is not there now is made at the new size at the next start.
	if _, err := m.volumes.Info(ctx, rec.ID); err == nil {
		if _, err := grower.Grow(ctx, rec.ID, sizeGiB); err != nil {
			return api.Sandbox{}, storageError("grow the workspace", err)
		}
	}
	return m.recordGrowth(ctx, rec, sizeGiB)
}

// recordGrowth records that rec's workspace grew to sizeGiB, by the call in ctx.
func (m *Manager) recordGrowth(ctx context.Context, rec store.Sandbox, sizeGiB int) (api.Sandbox, error) {
	rec.WorkspaceGiB = sizeGiB
	rec.Call = store.CallOf(ctx)
	if err := m.save(&rec); err != nil {
		return api.Sandbox{}, err
	}
	return m.view(ctx, rec), nil
}

// Snapshot seals a point-in-time copy of a sandbox's workspace; the sandbox keeps running.
func (m *Manager) Snapshot(ctx context.Context, name string, p api.SnapshotsPost) (api.Snapshot, error) {
	ctx = context.WithoutCancel(ctx)
	snapper, err := m.snapshotter()
	if err != nil {
		return api.Snapshot{}, err
	}
	if p.Name == "" {
		// Named after the bare name, in the sandbox's namespace: a key cut short could lose it.
		ns, bare := identity.Split(name)
		p.Name = identity.Key(ns, api.DefaultSnapshotName(bare, time.Now()))
	}
	if err := validKey("snapshot", p.Name); err != nil {
		return api.Snapshot{}, err
	}
	// Start, stop and delete wait for the seal; exec does not.
	defer m.lock(name)()
	rec, err := m.record(name)
	if err != nil {
		return api.Snapshot{}, err
	}
	if rec.StorageClass != string(api.StorageDurable) {
		return api.Snapshot{}, api.Errorf(api.CodeInvalidArgument, "sandbox %q has an ephemeral workspace: only durable workspaces can be snapshotted", displayName(name))
	}
	if _, err := admit(opSnapshot, rec); err != nil {
		return api.Snapshot{}, err
	}
	sn := store.Snapshot{
		ID:        newID(),
		Name:      p.Name,
		Sandbox:   rec.Name,
		SandboxID: rec.ID,
		State:     string(api.SnapshotSealing),
		CreatedAt: time.Now().UTC(),
		Call:      store.CallOf(ctx),
	}
	// The record comes first: a crash mid-copy leaves it "sealing", and Reconcile removes both.
	if err := m.store.CreateSnapshot(sn); err != nil {
		if errors.Is(err, store.ErrExists) {
			// A retry of this very call, sealed before a crash lost its receipt, gets the snapshot.
			if old, err := m.store.GetSnapshot(p.Name); err == nil && sn.Call.Made(old.Call) && old.State == string(api.SnapshotReady) {
				return snapshotView(old, nil), nil
			}
			return api.Snapshot{}, api.Errorf(api.CodeSnapshotExists, "snapshot %q already exists", displayName(p.Name))
		}
		return api.Snapshot{}, err
	}
	seal := &sealing{name: sn.Name}
	m.mu.Lock()
	m.seals[rec.ID] = seal
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.seals, rec.ID)
		m.mu.Unlock()
	}()

	info, err := snapper.Snapshot(ctx, rec.ID, sn.ID, func(done, total int64) {
		seal.done.Store(done)
		seal.total.Store(total)
	})
	if err != nil {
		m.removeSnapshot(ctx, snapper, sn)
		return api.Snapshot{}, storageError("seal the snapshot", err)
	}
	sn.State = string(api.SnapshotReady)
	sn.CapacityBytes = info.CapacityBytes
	sn.AllocatedBytes = info.AllocatedBytes
	sn.Reflinked = info.Reflinked
	if err := m.store.PutSnapshot(sn); err != nil {
		m.removeSnapshot(ctx, snapper, sn)
		return api.Snapshot{}, err
	}
	return snapshotView(sn, nil), nil
}

// removeSnapshot drops a snapshot's copy and record, logging what fails.
func (m *Manager) removeSnapshot(ctx context.Context, snapper volume.Snapshotter, sn store.Snapshot) {
	if err := snapper.DeleteSnapshot(ctx, sn.ID); err != nil {
		m.log.Error("remove snapshot", "snapshot", sn.Name, "err", err)
		return
	}
	if err := m.store.DeleteSnapshot(sn.Name); err != nil {
		m.log.Error("remove snapshot record", "snapshot", sn.Name, "err", err)
	}
}

// GetSnapshot returns one snapshot, with its progress while it seals.
func (m *Manager) GetSnapshot(name string) (api.Snapshot, error) {
	sn, err := m.snapshotRecord(name)
	if err != nil {
		return api.Snapshot{}, err
	}
	return snapshotView(sn, m.sealingOf(sn.SandboxID)), nil
}

// ListSnapshots returns every snapshot, or those taken of sandbox if it is not empty.
func (m *Manager) ListSnapshots(sandbox string) ([]api.Snapshot, error) {
	recs, err := m.store.ListSnapshots()
	if err != nil {
		return nil, err
	}
	out := []api.Snapshot{}
	for _, sn := range recs {
		if sandbox == "" || sn.Sandbox == sandbox {
			out = append(out, snapshotView(sn, m.sealingOf(sn.SandboxID)))
		}
	}
	return out, nil
}

// DeleteSnapshot removes a snapshot and frees the space only it holds.
func (m *Manager) DeleteSnapshot(ctx context.Context, name string) error {
	ctx = context.WithoutCancel(ctx)
	snapper, err := m.snapshotter()
	if err != nil {
		return err
	}
	sn, err := m.snapshotRecord(name)
	if err != nil {
		return err
	}
	if sn.State != string(api.SnapshotReady) {
		return snapshotInProgress(name)
	}
	return m.dropSnapshot(ctx, snapper, sn)
}

// dropSnapshot removes a ready snapshot: the record first, so a crash in between leaves a copy
// with no record, which Reconcile removes, never a record with no copy.
func (m *Manager) dropSnapshot(ctx context.Context, snapper volume.Snapshotter, sn store.Snapshot) error {
	if err := m.store.DeleteSnapshot(sn.Name); err != nil {
		return err
	}
	if err := snapper.DeleteSnapshot(ctx, sn.ID); err != nil {
		return fmt.Errorf("delete snapshot %q: %w", displayName(sn.Name), err)
	}
	return nil
}

// Restore rolls a stopped sandbox's workspace back to a snapshot.
func (m *Manager) Restore(ctx context.Context, name, snapName string) (api.Sandbox, error) {
	ctx = context.WithoutCancel(ctx)
	snapper, err := m.snapshotter()
	if err != nil {
		return api.Sandbox{}, err
	}
	if err := validKey("snapshot", snapName); err != nil {
		return api.Sandbox{}, err
	}
	defer m.lock(name)()
	rec, err := m.record(name)
	if err != nil {
		return api.Sandbox{}, err
	}
	sn, err := m.readySnapshot(snapName)
	if err != nil {
		return api.Sandbox{}, err
	}
	if rec.StorageClass != string(api.StorageDurable) {
		return api.Sandbox{}, api.Errorf(api.CodeInvalidArgument, "sandbox %q has an ephemeral workspace: restore needs a durable one", displayName(name))
	}
	if _, err := admit(opRestore, rec); err != nil {
		return api.Sandbox{}, err
	}
	m.budgetMu.Lock()
	defer m.budgetMu.Unlock()
	if err := m.admitStorage(fmt.Sprintf("restore snapshot %q into %q", displayName(snapName), displayName(name)), max(0, sn.CapacityBytes-int64(recordedGiB(rec))*gib)); err != nil {
		return api.Sandbox{}, err
	}
	info, err := snapper.Restore(ctx, rec.ID, sn.ID, nil)
	if err != nil {
		return api.Sandbox{}, storageError("restore the workspace", err)
	}
	rec.WorkspaceGiB = int(info.CapacityBytes / gib)
	if err := m.save(&rec); err != nil {
		return api.Sandbox{}, err
	}
	return m.view(ctx, rec), nil
}

// readySnapshot returns the record of a snapshot that can be read from.
func (m *Manager) readySnapshot(name string) (store.Snapshot, error) {
	sn, err := m.snapshotRecord(name)
	if err != nil {
		return sn, err
	}
	if sn.State != string(api.SnapshotReady) {
		return sn, snapshotInProgress(name)
	}
	return sn, nil
}

func (m *Manager) snapshotRecord(name string) (store.Snapshot, error) {
	if err := validKey("snapshot", name); err != nil {
		return store.Snapshot{}, err
	}
	sn, err := m.store.GetSnapshot(name)
	if errors.Is(err, store.ErrNotFound) {
		return sn, api.Errorf(api.CodeSnapshotNotFound, "snapshot %q not found", displayName(name))
	}
	return sn, err
}

// deleteSnapshotsOf removes every ready snapshot taken of the sandbox with id sandboxID.
func (m *Manager) deleteSnapshotsOf(ctx context.Context, sandboxID string) error {
	snapper, err := m.snapshotter()
	if err != nil {
		return nil // a driver without snapshots has none to delete
	}
	recs, err := m.store.ListSnapshots()
	if err != nil {
		return err
	}
	for _, sn := range recs {
		if sn.SandboxID != sandboxID {
			continue
		}
		if err := m.dropSnapshot(ctx, snapper, sn); err != nil {
			return err
		}
	}
	return nil
}

func snapshotInProgress(name string) error {
	return api.Errorf(api.CodeSnapshotInProgress, "snapshot %q is still sealing: repeat that snapshot request (with the same idempotency key) to wait for its outcome", displayName(name))
}

func snapshotView(sn store.Snapshot, s *sealing) api.Snapshot {
	out := api.Snapshot{
		Name:           sn.Name,
		ID:             sn.ID,
		Sandbox:        sn.Sandbox,
		State:          api.SnapshotState(sn.State),
		CapacityBytes:  sn.CapacityBytes,
		AllocatedBytes: sn.AllocatedBytes,
		Reflinked:      sn.Reflinked,
		CreatedAt:      sn.CreatedAt,
	}
	if s != nil && s.name == sn.Name && out.State == api.SnapshotSealing {
		out.Progress = &api.Progress{DoneBytes: s.done.Load(), TotalBytes: s.total.Load()}
	}
	return out
}

// storageError turns a volume error into the API's: no room is insufficient_storage with the
// free figure.
func storageError(what string, err error) error {
	var noSpace *volume.NoSpaceError
	switch {
	case errors.As(err, &noSpace):
		return api.Errorf(api.CodeInsufficientStorage, "not enough free space to %s: it needs %s, the pool has %s free",
			what, units.Bytes(noSpace.NeedBytes), units.Bytes(noSpace.FreeBytes))
	case errors.Is(err, volume.ErrNoSpace), isENOSPC(err):
		return api.Errorf(api.CodeInsufficientStorage, "not enough free space to %s: %v", what, err)
	case errors.Is(err, volume.ErrUnsupported):
		return api.Errorf(api.CodeUnsupported, "cannot %s: %v", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
