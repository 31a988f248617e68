package volume

import (
	"context"
	"errors"
)

// ErrNoSpace is returned when the pool has no room for a volume, a growth or a snapshot. It
// wraps the free figure: see NoSpaceError.
var ErrNoSpace = errors.New("not enough free space in the volume pool")

// NoSpaceError says how much room an operation needed and how much the pool has.
type NoSpaceError struct {
	NeedBytes int64
	FreeBytes int64
}

func (e *NoSpaceError) Error() string { return ErrNoSpace.Error() }

// Unwrap makes errors.Is(err, ErrNoSpace) work.
func (e *NoSpaceError) Unwrap() error { return ErrNoSpace }

// SnapshotInfo describes a sealed snapshot.
type SnapshotInfo struct {
	ID string
	// CapacityBytes is the capacity of the volume the snapshot was taken of.
	CapacityBytes int64
	// AllocatedBytes is the data the snapshot holds (allocated blocks of its image).
	AllocatedBytes int64
	// Reflinked says the snapshot shares its blocks with the volume (copy-on-write) instead of
	// being a full copy.
	Reflinked bool
}

// Progress receives how far a long copy is, in bytes; it may be nil.
type Progress func(done, total int64)

// Snapshotter is implemented by drivers that seal point-in-time copies of volumes and make
// volumes from them. Snapshot ids share the naming rule of volume ids.
type Snapshotter interface {
	// Snapshot seals a consistent copy of volume id as snapshot snapID. A mounted volume's
	// filesystem is frozen for the copy (writers wait; no process is stopped). Either the
	// snapshot is complete and durable (fsynced) when it returns, or nothing of it is left.
	Snapshot(ctx context.Context, id, snapID string, progress Progress) (SnapshotInfo, error)
	// DeleteSnapshot removes a snapshot and frees the space only it holds; deleting a missing
	// one succeeds.
	DeleteSnapshot(ctx context.Context, snapID string) error
	// SnapshotInfo describes a snapshot; ErrNotFound if there is none.
	SnapshotInfo(ctx context.Context, snapID string) (SnapshotInfo, error)
	// ListSnapshots returns the ids of every snapshot, complete or not (for reconciling).
	ListSnapshots(ctx context.Context) ([]string, error)
	// CreateFromSnapshot makes a new volume id whose content is the snapshot's; the two then
	// diverge independently.
	CreateFromSnapshot(ctx context.Context, id, snapID string, progress Progress) (Info, error)
	// Restore replaces the content of the unmounted volume id with the snapshot's, keeping the
	// volume's capacity if it grew after the snapshot.
	Restore(ctx context.Context, id, snapID string, progress Progress) (Info, error)
}
