package sandbox

import (
	"fmt"
	"math"
	"strconv"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/units"
	"github.com/hiloop/hiloop/pkg/api"
)

// Storage is a pool the capacity budget weighs promises against (volume.XFS, volume.Layers).
type Storage interface {
	// FreeBytes is the room left in it, bounded by the host filesystem's free space.
	FreeBytes() (int64, error)
	// HeldBytes is the room it already takes on the host.
	HeldBytes() (int64, error)
}

// budget is the capacity budget: the workspaces of every sandbox, the root filesystems of the
// running ones and the data of every snapshot are promises on the host's disk, because the
// images are sparse. The
// capacity they may not exceed is what the pools could still hold (the free space plus what
// they hold already, part of which the promises are) times the operator's overcommit ratio.
type budget struct {
	overcommit float64
	pools      []Storage
}

// SetBudget makes create, fork, grow, restore and start refuse,
// with insufficient_storage, what would promise more than overcommit times the capacity of
// pools. Without a call (or with no pools) nothing is budgeted. Call it before serving.
func (m *Manager) SetBudget(overcommit float64, pools ...Storage) {
	m.budget = budget{overcommit: overcommit, pools: pools}
}

// admitStorage refuses an operation that asks for ask more bytes (what it would add to the
// promises, possibly 0) when the promises would then exceed the budget. what says what is
// refused, e.g. `create sandbox "web"`. Callers that record their promise afterwards hold
// m.budgetMu from this call until it is recorded.
func (m *Manager) admitStorage(what string, ask int64) error {
	if len(m.budget.pools) == 0 {
		return nil
	}
	recs, err := m.store.ListSandboxes()
	if err != nil {
		return fmt.Errorf("capacity budget: %w", err)
	}
	room, err := m.storageRoom(recs)
	if err != nil {
		return err
	}
	return room.refusal(what, ask)
}

// storageRoom is the capacity budget as it stands: what the pools can keep and what is
// promised already.
type storageRoom struct {
	free, held, promised, capacity int64
	overcommit                     float64
}

// storageRoom reads the pools and weighs them against the promises of recs, every sandbox's
// record, and of the snapshots; nil when nothing is budgeted. The caller holds m.budgetMu if it
// records a promise on the strength of it.
func (m *Manager) storageRoom(recs []store.Sandbox) (*storageRoom, error) {
	if len(m.budget.pools) == 0 {
		return nil, nil
	}
	free, held := int64(math.MaxInt64), int64(0)
	for _, p := range m.budget.pools {
		f, err := p.FreeBytes()
		if err != nil {
			return nil, fmt.Errorf("capacity budget: %w", err)
		}
		h, err := p.HeldBytes()
		if err != nil {
			return nil, fmt.Errorf("capacity budget: %w", err)
		}
		free = min(free, f)
		held += h
	}
	promised, err := m.promised(recs)
	if err != nil {
		return nil, fmt.Errorf("capacity budget: %w", err)
	}
	return &storageRoom{
		free: free, held: held, promised: promised, overcommit: m.budget.overcommit,
		capacity: int64(float64(free+held) * m.budget.overcommit),
	}, nil
}

// refusal is nil when ask more bytes fit in the room (or nothing is budgeted), else the
// insufficient_storage error that says what (e.g. `create sandbox "web"`) asks and what the
// host can keep.
func (r *storageRoom) refusal(what string, ask int64) error {
	if r == nil || r.promised+ask <= r.capacity {
		return nil
	}
	return api.Errorf(api.CodeInsufficientStorage,
		"not enough storage to %s: it asks for %s more, %s is promised already (workspaces, root filesystems, snapshots), and the host can keep %s (%s free + %s held by sandboxes and snapshots, × overcommit %s)",
		what, units.Bytes(ask), units.Bytes(r.promised), units.Bytes(r.capacity), units.Bytes(r.free), units.Bytes(r.held),
		strconv.FormatFloat(r.overcommit, 'g', -1, 64))
}

// promised sums what every sandbox of recs and every snapshot may come to take: the capacity of
// each workspace and root filesystem (sparse, so not taken yet), and the data each snapshot
// holds (its own once the workspace it shares blocks with is rewritten).
func (m *Manager) promised(recs []store.Sandbox) (int64, error) {
	var sum int64
	for _, rec := range recs {
		sum += sandboxPromise(rec)
	}
	snaps, err := m.store.ListSnapshots()
	if err != nil {
		return 0, err
	}
	for _, sn := range snaps {
		sum += sn.AllocatedBytes
	}
	return sum, nil
}

// sandboxPromise is the room rec's workspace and root filesystem may come to take. The root
// filesystem's layer exists from a start's admission to the end of its stop, so only a sandbox
// that may be running promises it: the start admits it (admitStart).
func sandboxPromise(rec store.Sandbox) int64 {
	n := int64(recordedGiB(rec)) * gib
	if holdsHostShare(api.SandboxState(rec.State)) {
		n += rootfsBytes(rec)
	}
	return n
}

func rootfsBytes(rec store.Sandbox) int64 { return int64(rootfsGiB(rec)) * gib }
