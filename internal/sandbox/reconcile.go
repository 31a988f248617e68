package sandbox

import (
	"context"
	"os"
	"path/filepath"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// reconcileParallel bounds the sandboxes Reconcile handles at once: enough to overlap their
// waits, few enough that sandboxes it has to start again start about as many at a time as
// creates do.
const reconcileParallel = 16

// Reconcile makes the store and the host agree after a daemon start: transitions cut short by a
// crash are finished or undone, sandboxes that were running run again, and containers, volumes
// and layer directories that belong to no record are removed.
func (m *Manager) Reconcile(ctx context.Context) error {
	recs, err := m.store.ListSandboxes()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, rec := range recs {
		known[rec.ID] = true
	}
	// The records are reconciled reconcileParallel at a time: each waits on its sandbox (a
	// probe of its init, up to 2 s for one its own processes starve; its egress served again in
	// its network namespace), and the daemon serves nothing until all are done: one after
	// another, their waits added up.
	atOnce(len(recs), reconcileParallel, func(i int) {
		defer m.lock(recs[i].Name)()
		m.reconcileOne(ctx, recs[i])
	})
	ids, err := m.runtime.List()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !known[id] {
			m.log.Warn("removing container with no sandbox (a spare, or a create cut short)", "id", id)
			if err := m.runtime.Stop(ctx, id, runtime.DefaultStopGrace); err != nil {
				m.log.Error("remove stray container", "id", id, "err", err)
			}
		}
	}
	vols, err := m.volumes.List(ctx)
	if err != nil {
		return err
	}
	for _, id := range vols {
		if !known[id] {
			m.log.Warn("removing workspace with no sandbox", "id", id)
			if err := m.volumes.Delete(ctx, id); err != nil {
				m.log.Error("remove stray workspace", "id", id, "err", err)
			}
		}
	}
	if m.layers != nil {
		layers, err := m.layers.List(ctx)
		if err != nil {
			return err
		}
		for _, id := range layers {
			if !known[id] {
				m.log.Warn("removing root filesystem with no sandbox", "id", id)
				if err := m.layers.Drop(ctx, id); err != nil {
					m.log.Error("remove stray root filesystem", "id", id, "err", err)
				}
			}
		}
	}
	if err := m.reconcileSnapshots(ctx); err != nil {
		return err
	}
	entries, _ := os.ReadDir(m.layerDir)
	for _, e := range entries {
		if !known[e.Name()] {
			if err := m.runtime.RemoveLayer(filepath.Join(m.layerDir, e.Name())); err != nil {
				m.log.Error("remove stray layers", "id", e.Name(), "err", err)
			}
		}
	}
	return nil
}

func (m *Manager) reconcileOne(ctx context.Context, rec store.Sandbox) {
	log := m.log.With("sandbox", rec.Name, "state", rec.State)
	plan := ruleOf(api.SandboxState(rec.State)).recover
	if rec.Unanswered && plan != reconcileFinishDelete {
		// Its create never answered (the crash came during its start): its client retries it.
		plan = reconcileUndoCreate
	}
	var err error
	switch plan {
	case reconcileUndoCreate:
		log.Info("undoing interrupted create")
		m.undoCreate(ctx, rec)
		return
	case reconcileFinishDelete:
		log.Info("finishing interrupted delete")
		err = m.delete(ctx, &rec)
	case reconcileKeepIfLive, reconcileRestart:
		if plan == reconcileKeepIfLive && m.alive(rec.ID) {
			// Still running from before the restart (its init answering or not): the workspace
			// stays mounted with it, and its egress, served by the daemon that died, is served
			// again.
			if m.egress == nil {
				log.Info("sandbox still running")
				return
			}
			if err = m.egress.Attach(ctx, rec.ID, rec.Name, EgressOf(rec)); err == nil {
				log.Info("sandbox still running; egress served again")
				return
			}
			log.Error("sandbox still running, but its egress cannot be served again: restarting it", "err", err)
		}
		log.Info("restarting sandbox that was running")
		if err = m.stopContainer(ctx, &rec); err == nil {
			err = m.start(ctx, &rec)
		}
	case reconcileFinishStop:
		log.Info("finishing interrupted stop")
		err = m.stop(ctx, &rec)
	case reconcileRelease:
		// Nothing of a stopped or failed sandbox runs or stays mounted.
		err = m.stopContainer(ctx, &rec)
	}
	if err != nil {
		log.Error("reconcile", "err", err)
		_ = m.setState(&rec, api.StateFailed, err.Error())
	}
}

// reconcileSnapshots removes seals a crash cut short (their client never got an answer) and
// snapshot copies that belong to no record.
func (m *Manager) reconcileSnapshots(ctx context.Context) error {
	snapper, err := m.snapshotter()
	if err != nil {
		return nil
	}
	recs, err := m.store.ListSnapshots()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, sn := range recs {
		if sn.State != string(api.SnapshotReady) {
			m.log.Info("removing snapshot whose seal was interrupted", "snapshot", sn.Name)
			m.removeSnapshot(ctx, snapper, sn)
			continue
		}
		known[sn.ID] = true
	}
	ids, err := snapper.ListSnapshots(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !known[id] {
			m.log.Warn("removing snapshot copy with no record", "id", id)
			if err := snapper.DeleteSnapshot(ctx, id); err != nil {
				m.log.Error("remove stray snapshot", "id", id, "err", err)
			}
		}
	}
	return nil
}
