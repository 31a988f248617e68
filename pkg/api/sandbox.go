// Package api holds every type that crosses the wire between sandboxd and its clients, and the
// stable error codes. It is the public contract: fields are added, never renamed or removed.
package api

import (
	"slices"
	"strings"
	"time"
)

// Version is the API version every route lives under.
const Version = "v1"

// VersionHeader carries the daemon's version on every response.
const VersionHeader = "Sandboxd-Version"

// PartialHeader names, on a list a cluster's front gathered from its node agents, the nodes
// whose part is missing (not ready, or failed), comma-separated; absent when none is.
const PartialHeader = "Hiloop-Partial"

// IdempotencyKeyHeader makes a mutating call safe to repeat: the same key and body returns the
// first result; the same key with a different request is idempotency_key_reused.
const IdempotencyKeyHeader = "Idempotency-Key"

// MaxBodyBytes is the largest request body the daemon accepts.
const MaxBodyBytes = 1 << 20

// SandboxState is where a sandbox is in its lifecycle:
// creating → stopped → starting → running → stopping → stopped; deleting from any state; failed
// after a start, stop or delete that failed. On a cluster's front, also pending (waiting for a
// node) and unavailable (its node's agent does not answer).
type SandboxState string

// The sandbox states. Only the daemon writes them.
const (
	StateCreating SandboxState = "creating"
	StateStopped  SandboxState = "stopped"
	StateStarting SandboxState = "starting"
	StateRunning  SandboxState = "running"
	StateStopping SandboxState = "stopping"
	StateDeleting SandboxState = "deleting"
	StateFailed   SandboxState = "failed"
	// StatePending is a cluster's sandbox waiting for a node: the scheduler found none with
	// room (Message has its words), or a ResourceQuota of its namespace is full.
	StatePending SandboxState = "pending"
	// StateUnavailable is a cluster's sandbox whose node is not ready or gone: it may still run
	// there, but nothing reaches it until its agent is back (Message names the node).
	StateUnavailable SandboxState = "unavailable"
)

var sandboxStates = [...]SandboxState{
	StateCreating, StateStopped, StateStarting, StateRunning, StateStopping, StateDeleting, StateFailed,
}

// SandboxStates returns every state a sandbox has on a host: a single host's daemon, or a
// cluster's node agent.
func SandboxStates() []SandboxState { return slices.Clone(sandboxStates[:]) }

// ClusterSandboxStates returns the states only a cluster's front answers with, besides
// SandboxStates: a sandbox that has no node yet, or whose node does not answer.
func ClusterSandboxStates() []SandboxState { return []SandboxState{StatePending, StateUnavailable} }

// StorageClass is the lifetime of a sandbox's /workspace.
type StorageClass string

// The storage classes.
const (
	// StorageDurable keeps /workspace across stop and start.
	StorageDurable StorageClass = "durable"
	// StorageEphemeral drops /workspace at every stop.
	StorageEphemeral StorageClass = "ephemeral"
)

var storageClasses = [...]StorageClass{StorageDurable, StorageEphemeral}

// StorageClasses returns every storage class.
func StorageClasses() []StorageClass { return slices.Clone(storageClasses[:]) }

// Defaults and limits of sandbox resources.
const (
	DefaultImage        = "base"
	DefaultWorkspaceGiB = 10
	MinWorkspaceGiB     = 1
	MaxWorkspaceGiB     = 16383 // a sparse image must fit ext4's largest file, 16 TiB less 4 KiB
	DefaultRootfsGiB    = 4
	MinRootfsGiB        = 1
	MaxRootfsGiB        = 16383 // as a workspace: a sparse image on the host
	DefaultCPUs         = 2.0
	MinCPUs             = 0.1
	MaxCPUs             = 256.0
	DefaultMemoryMB     = 2048
	MinMemoryMB         = 64
	MaxMemoryMB         = 1 << 20
	MaxNameLen          = 63
)

// SandboxesPost is the body of POST /v1/sandboxes.
type SandboxesPost struct {
	// Name is 1-63 chars of [a-z0-9-] starting with a letter, e.g. "web".
	Name string `json:"name"`
	// Image is the image's name, e.g. "base" (default).
	Image string `json:"image,omitempty"`
	// StorageClass is "durable" (default) or "ephemeral".
	StorageClass StorageClass `json:"storage_class,omitempty"`
	// WorkspaceGiB is the workspace capacity in GiB (default 10; the dir driver takes none).
	WorkspaceGiB int `json:"workspace_gib,omitempty"`
	// RootfsGiB bounds what the sandbox writes outside /workspace, in GiB (default 10): beyond
	// it, and beyond its inode limit, writes fail with ENOSPC. It is wiped at every start.
	RootfsGiB int `json:"rootfs_gib,omitempty"`
	// CPUs is the CPU limit in cores (default 2).
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryMB is the memory limit in MiB (default 2048).
	MemoryMB int `json:"memory_mb,omitempty"`
	// NoStart leaves the new sandbox stopped instead of starting it.
	NoStart bool `json:"no_start,omitempty"`
	// FromSnapshot starts the new sandbox's /workspace as a copy of this snapshot (durable only).
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// PermissionPolicy answers its sessions' permission requests unless a session overrides it:
	// "auto-approve" (default) or "ask".
	PermissionPolicy PermissionPolicy `json:"permission_policy,omitempty"`
	// Egress is the sandbox's egress policy; absent means open with no rules. It can be changed
	// later with PUT /v1/sandboxes/{name}/egress.
	Egress *Egress `json:"egress,omitempty"`
	// Secrets are attached to it from the start (see SecretAttachment); each must exist.
	Secrets []SecretAttachment `json:"secrets,omitempty"`
	// ModelBudgetTokens is the sandbox's model token budget, e.g. 5000000: once its harnesses
	// have spent that many tokens (ModelUsage.TotalTokens), the model route refuses their
	// requests until the budget is raised (PUT /v1/sandboxes/{name}/budget). 0: none.
	ModelBudgetTokens int64 `json:"model_budget_tokens,omitempty"`
}

// Workspace describes a sandbox's /workspace volume.
type Workspace struct {
	// StorageClass is "durable" or "ephemeral".
	StorageClass StorageClass `json:"storage_class"`
	// CapacityBytes is the size of the filesystem, e.g. 10737418240.
	CapacityBytes int64 `json:"capacity_bytes"`
	// Resizable tells whether the workspace can grow (false on fixed-geometry drivers).
	Resizable bool `json:"resizable"`
	// Driver is the volume driver, e.g. "xfs" or "dir".
	Driver string `json:"driver"`
}

// Rootfs describes a sandbox's writable root filesystem: everything outside /workspace, wiped
// at every start.
type Rootfs struct {
	// CapacityBytes is its size limit, e.g. 10737418240.
	CapacityBytes int64 `json:"capacity_bytes"`
	// Limited is false on a daemon that cannot enforce the limit (no loop devices or no
	// mkfs.ext4): the sandbox then writes into the host's filesystem unbounded.
	Limited bool `json:"limited"`
}

// Sandbox is a sandbox as the API reports it.
type Sandbox struct {
	// CPUs is the CPU limit in cores, e.g. 2 or 0.5. The limits lead the JSON object, as they
	// always have.
	CPUs float64 `json:"cpus"`
	// MemoryMB is the memory limit in MiB, e.g. 2048.
	MemoryMB int `json:"memory_mb"`
	// Name is the sandbox's name, also its hostname.
	Name string `json:"name"`
	// Owner is the user whose namespace the sandbox is in, e.g. "admin".
	Owner string `json:"owner"`
	// ID is the daemon's internal id, stable for the sandbox's life.
	ID string `json:"id"`
	// Image is the image the root filesystem comes from.
	Image string `json:"image"`
	// State is the lifecycle state, e.g. "running".
	State SandboxState `json:"state"`
	// Workspace describes /workspace.
	Workspace Workspace `json:"workspace"`
	// Rootfs describes its writable root filesystem.
	Rootfs Rootfs `json:"rootfs"`
	// PermissionPolicy is the default policy of its sessions: "auto-approve" or "ask".
	PermissionPolicy PermissionPolicy `json:"permission_policy"`
	// Egress is the sandbox's egress policy, e.g. {"mode": "closed", "allow": ["api.example.com"]}.
	Egress Egress `json:"egress"`
	// Secrets are the secrets attached to it and their variables.
	Secrets []SecretAttachment `json:"secrets,omitempty"`
	// Exposures are its ports the host listens for (hiloop sandbox expose).
	Exposures []Exposure `json:"exposures,omitempty"`
	// Error says why the sandbox is "failed", if it is.
	Error string `json:"error,omitempty"`
	// Node is, on a cluster, the node (a node agent) that holds the sandbox's workspace, e.g.
	// "agent-1"; empty on a single host and until the sandbox is placed.
	Node string `json:"node,omitempty"`
	// Message says, on a cluster, why the sandbox is pending or unavailable, e.g. the
	// scheduler's "0/2 nodes are available: 2 Insufficient cpu."
	Message string `json:"message,omitempty"`
	// CreatedAt is when the sandbox was created.
	CreatedAt time.Time `json:"created_at"`
	// StartedAt is when the sandbox last started; zero while stopped.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// ImageBuiltAt is, while it runs, when the build of Image its root filesystem came from
	// was made (an image's builds follow one another: each start takes the latest).
	ImageBuiltAt *time.Time `json:"image_built_at,omitempty"`
	// ImageRebuilt is true when Image was built again after that build, in the answers of get
	// and list: the sandbox runs the older one until its next start.
	ImageRebuilt bool `json:"image_rebuilt,omitempty"`
	// Unresponsive is true when the sandbox is running but its init did not answer within the
	// daemon's short deadline (half a second) while get or list looked: its CPU limit starved by
	// a fork bomb, say. Its state stays "running"; an exec may be slow or fail until it recovers.
	Unresponsive bool `json:"unresponsive,omitempty"`
	// OOMKills counts the processes the kernel killed for the memory limit (MemoryMB) since the
	// sandbox started; 0 while it is stopped.
	OOMKills uint64 `json:"oom_kills,omitempty"`
	// ModelUsage is what its harnesses have spent through the model route and its token
	// budget; in the answers of get, list and create.
	ModelUsage *ModelUsage `json:"model_usage,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ValidateName checks the naming rule shared by sandboxes, snapshots and images.
func ValidateName(kind, name string) error {
	if name == "" {
		return Errorf(CodeInvalidName, "%s name is empty: use 1-%d characters of a-z, 0-9 and '-', starting with a letter", kind, MaxNameLen)
	}
	if len(name) > MaxNameLen || !shaped(name, isLower, func(c byte) bool { return isLower(c) || isDigit(c) || c == '-' }) {
		return Errorf(CodeInvalidName, "invalid %s name %q: use 1-%d characters of a-z, 0-9 and '-', starting with a letter", kind, name, MaxNameLen)
	}
	return nil
}

// validateWorkspaceGiB checks a workspace capacity a client asked for, at create or grow.
func validateWorkspaceGiB(gib int) error {
	if gib < MinWorkspaceGiB || gib > MaxWorkspaceGiB {
		return Errorf(CodeInvalidArgument, "invalid workspace_gib %d: use %d to %d", gib, MinWorkspaceGiB, MaxWorkspaceGiB)
	}
	return nil
}

// Normalize fills the defaults of a create request and validates every field, reporting
// every invalid one together (Problems).
func (p *SandboxesPost) Normalize() error {
	var ps Problems
	if err := ValidateName("sandbox", p.Name); err != nil {
		ps.Add("name", err)
	} else if strings.HasSuffix(p.Name, "-") {
		// The name is the sandbox's hostname, which may not end in '-' (RFC 1123).
		ps.Addf("name", CodeInvalidName, "invalid sandbox name %q: it is the sandbox's hostname, which cannot end in '-'", p.Name)
	}
	if p.Image == "" {
		p.Image = DefaultImage
	} else {
		ps.Add("image", ValidateName("image", p.Image))
	}
	switch p.StorageClass {
	case "":
		p.StorageClass = StorageDurable
	case StorageDurable, StorageEphemeral:
	default:
		ps.Addf("storage_class", CodeInvalidArgument, "invalid storage_class %q: use durable or ephemeral", p.StorageClass)
	}
	if p.WorkspaceGiB != 0 {
		ps.Add("workspace_gib", validateWorkspaceGiB(p.WorkspaceGiB))
	}
	if p.RootfsGiB != 0 && (p.RootfsGiB < MinRootfsGiB || p.RootfsGiB > MaxRootfsGiB) {
		ps.Addf("rootfs_gib", CodeInvalidArgument, "invalid rootfs_gib %d: use %d to %d", p.RootfsGiB, MinRootfsGiB, MaxRootfsGiB)
	}
	if p.FromSnapshot != "" {
		if err := ValidateName("snapshot", p.FromSnapshot); err != nil {
			ps.Add("from_snapshot", err)
		} else if p.StorageClass == StorageEphemeral {
			ps.Addf("from_snapshot", CodeInvalidArgument, "from_snapshot needs storage_class durable: an ephemeral workspace starts empty at every start")
		}
	}
	ps.Add("permission_policy", ValidatePolicy("permission_policy", p.PermissionPolicy))
	if p.PermissionPolicy == "" {
		p.PermissionPolicy = PolicyAutoApprove
	}
	if p.Egress != nil {
		ps.Add("egress", p.Egress.Normalize("egress"))
	}
	ps.Add("secrets", NormalizeSecretAttachments("secrets", p.Secrets))
	ps.Add("model_budget_tokens", ValidateBudget("model_budget_tokens", p.ModelBudgetTokens))
	if p.CPUs == 0 {
		p.CPUs = DefaultCPUs
	} else if !(p.CPUs >= MinCPUs && p.CPUs <= MaxCPUs) { // NaN fails every comparison
		ps.Addf("cpus", CodeInvalidArgument, "invalid cpus %g: use %g to %g", p.CPUs, MinCPUs, MaxCPUs)
	}
	if p.MemoryMB == 0 {
		p.MemoryMB = DefaultMemoryMB
	} else if p.MemoryMB < MinMemoryMB || p.MemoryMB > MaxMemoryMB {
		ps.Addf("memory_mb", CodeInvalidArgument, "invalid memory_mb %d: use %d to %d", p.MemoryMB, MinMemoryMB, MaxMemoryMB)
	}
	return ps.Err()
}
