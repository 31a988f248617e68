package runtime

// Every sandbox's share of the host-wide kernel pools, fixed whatever its spec. sandboxd raises
// the host's limits at start and admits a start only while the shares of the running sandboxes
// fit under them (internal/daemon's host limits), so that no sandbox can drain a pool another
// sandbox or the host needs.
const (
	// PidsPerSandbox is every sandbox's pids.max: its processes and threads together. 4096 is
	// ample for builds and harnesses under a few cores, and 1,000 sandboxes of it fit under the
	// kernel's largest pid_max (4194304) with room kept for the host.
	PidsPerSandbox = 4096
	// PtysPerSandbox is the max= of every sandbox's own devpts instance: the pseudo-terminals
	// it can hold at once (shells, tmux panes, SSH sessions). 1,000 sandboxes of it fit under
	// the kernel's largest useful kernel.pty.max (1048576).
	PtysPerSandbox = 1024
)

// Liveness is what a look at a sandbox's init found.
type Liveness int

// The answers of Runtime.Probe.
const (
	// Gone: there is no container, or its init is dead or does not serve its socket.
	Gone Liveness = iota
	// Answering: the init answered a ping.
	Answering
	// Unresponsive: the init is alive but did not answer within the deadline, e.g. starved of
	// CPU by a fork bomb under the sandbox's own limit, or stopped.
	Unresponsive
)
