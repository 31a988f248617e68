package api

import "time"

// SnapshotState is where a snapshot is: "sealing" while its copy is made, then "ready".
type SnapshotState string

// The snapshot states.
const (
	SnapshotSealing SnapshotState = "sealing"
	SnapshotReady   SnapshotState = "ready"
)

// SnapshotsPost is the body of POST /v1/sandboxes/{name}/snapshots.
type SnapshotsPost struct {
	// Name is the snapshot's name, unique in its owner's namespace (default
	// "<sandbox>-<UTC time>").
	Name string `json:"name,omitempty"`
}

// Snapshot is a sealed, point-in-time copy of a sandbox's /workspace.
type Snapshot struct {
	// Name is the snapshot's name, e.g. "web-20261129-101500".
	Name string `json:"name"`
	// Owner is the user whose namespace the snapshot is in (its sandbox's owner).
	Owner string `json:"owner"`
	// ID is the daemon's internal id.
	ID string `json:"id"`
	// Sandbox is the name of the sandbox it was taken of (which may since have been deleted).
	Sandbox string `json:"sandbox"`
	// State is "sealing" or "ready".
	State SnapshotState `json:"state"`
	// CapacityBytes is the workspace capacity at the time of the snapshot.
	CapacityBytes int64 `json:"capacity_bytes"`
	// AllocatedBytes is the data the snapshot holds.
	AllocatedBytes int64 `json:"allocated_bytes"`
	// Reflinked says the snapshot shares unchanged blocks with its source (copy-on-write).
	Reflinked bool `json:"reflinked"`
	// Progress is how far a sealing snapshot's copy is, in bytes (absent once ready).
	Progress *Progress `json:"progress,omitempty"`
	// CreatedAt is when the snapshot was requested.
	CreatedAt time.Time `json:"created_at"`
}

// Progress is how far a long operation is.
type Progress struct {
	DoneBytes  int64 `json:"done_bytes"`
	TotalBytes int64 `json:"total_bytes"`
}

// SnapshotList is the body of GET /v1/snapshots and GET /v1/sandboxes/{name}/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// GrowPost is the body of POST /v1/sandboxes/{name}/grow.
type GrowPost struct {
	// WorkspaceGiB is the new capacity in GiB; it must exceed the current one.
	WorkspaceGiB int `json:"workspace_gib"`
}

// Validate checks a grow request's size against the limits a create has; whether it exceeds the
// current size only the daemon knows.
func (p *GrowPost) Validate() error {
	var ps Problems
	ps.Add("workspace_gib", validateWorkspaceGiB(p.WorkspaceGiB))
	return ps.Err()
}

// RestorePost is the body of POST /v1/sandboxes/{name}/restore.
type RestorePost struct {
	// Snapshot is the name of the snapshot to roll /workspace back to.
	Snapshot string `json:"snapshot"`
}

// DefaultSnapshotName names a snapshot of sandbox taken at t.
func DefaultSnapshotName(sandbox string, t time.Time) string {
	suffix := t.UTC().Format("-20060102-150405")
	if len(sandbox)+len(suffix) > MaxNameLen {
		sandbox = sandbox[:MaxNameLen-len(suffix)]
	}
	return sandbox + suffix
}
