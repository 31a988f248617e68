// Package runtime runs sandboxes as libcontainer containers and serves execs in them.
//
// It owns, per sandbox: the overlay root filesystem (a read-only image plus an upper layer wiped
// on every start), the libcontainer state, the cgroup, and the sandbox's init (hiloop-init, PID 1,
// which reaps orphans and spawns execs on request over a unix socket). It must not touch the
// store or the workspace volume's lifetime: the caller hands it an already mounted workspace
// (or a function that waits for one).
package runtime

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotRunning is returned by Exec and DialLoopback when the sandbox does not run.
var ErrNotRunning = errors.New("sandbox is not running")

// ErrSandboxDied is returned by Process.Wait when the sandbox's init went away mid-exec.
var ErrSandboxDied = errors.New("sandbox stopped while the command was running")

// Spec describes one sandbox to start.
type Spec struct {
	// ID is the container id: unique on the host, [a-z0-9-], at most 32 chars.
	ID string
	// Hostname is the sandbox's hostname, also written to /etc/hosts.
	Hostname string
	// ImageDir is the read-only lower layer (a rootfs directory).
	ImageDir string
	// WritableImage makes ImageDir itself the sandbox's root filesystem, writable, with no
	// overlay: for an image build, whose steps change a copy of an image. It is idmapped like
	// the workspace, so ids on disk are ids inside and what root inside writes belongs to host
	// root on disk, as in any image. The runtime writes /etc/hostname, /etc/hosts and (with a
	// Nameserver) /etc/resolv.conf into it; the caller puts back what it wants kept.
	WritableImage bool
	// LayerDir is a directory the runtime owns for this sandbox: upper, work and merged live here.
	LayerDir string
	// WorkspaceDir is a host directory bind-mounted at /workspace; empty means none. It is
	// mounted idmapped: the ids on disk are the ids inside (uid 1000 on disk is agent inside),
	// whatever IDBase is.
	WorkspaceDir string
	// Workspace, when set, gives WorkspaceDir: the runtime calls it once, after its own
	// preparation (the user namespace and the root filesystem's mount) and before the
	// container starts, so the caller can make the workspace beside that preparation. An
	// error fails the start.
	Workspace func() (string, error)
	// Network, when set, gives the sandbox its network once its namespaces exist: the runtime
	// runs it beside the wait for the init to answer, and the start fails if it fails (the
	// caller undoes what it did). The sandbox is not reported started before it returns, so
	// its first process already has its way out.
	Network func(ctx context.Context) error
	// IDBase is the first of the IDRangeSize host uids and gids the sandbox's user namespace
	// maps its ids 0..IDRangeSize-1 to: root inside is host uid IDBase. It must be at least
	// IDRangeSize (no host account), and no other sandbox may have an overlapping range.
	IDBase uint32
	// CPUs limits CPU time in cores (0 means no limit).
	CPUs float64
	// MemoryMB limits memory in MiB (0 means no limit).
	MemoryMB int
	// Nameserver is the resolver /etc/resolv.conf names, e.g. "127.0.0.1" for the egress
	// gateway's; empty leaves the image's file.
	Nameserver string
	// ExtraCAs are PEM certificates the sandbox trusts besides the image's (the egress
	// gateway's CA, the operator's): written alone to ExtraCAPath and, those the image's system
	// bundle lacks, appended to a copy of it at CABundlePath (created if the image has none).
	// Empty leaves the image's files.
	ExtraCAs []byte
	// Spare starts the sandbox ahead of need, without its workspace (Workspace and
	// WorkspaceDir must be unset): Adopt gives it, its hostname and (with AdoptSpec.Network)
	// what its network still needs when a create takes it. Until then /workspace is an empty
	// directory that will receive the workspace's mount, and Hostname a placeholder; Network,
	// if set, prepares what it can ahead.
	Spare bool
}

// AdoptSpec is what a spare sandbox (Spec.Spare) gets when a create takes it.
type AdoptSpec struct {
	// Hostname replaces the spare's placeholder: the kernel's and /etc's.
	Hostname string
	// Workspace gives the host directory mounted at /workspace, idmapped as Spec.WorkspaceDir.
	// It is called once, beside Network.
	Workspace func() (string, error)
	// Network, when set, gives the sandbox its network, beside the workspace.
	Network func(ctx context.Context) error
}

// IDRangeSize is how many host uids (and as many gids) each sandbox's user namespace maps:
// ids 0 to 65535 inside, which covers every account an image has (nobody is 65534).
const IDRangeSize = 1 << 16

// Where a sandbox finds Spec.ExtraCAs.
const (
	// CABundlePath is the system bundle (Debian's path; OpenSSL, curl, Go and Python read it):
	// the image's certificates and then Spec.ExtraCAs.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	// ExtraCAPath holds Spec.ExtraCAs alone (for NODE_EXTRA_CA_CERTS, which adds to Node's own
	// roots).
	ExtraCAPath = "/etc/hiloop/ca-certificates.pem"
)

// ExecSpec describes one process to run in a running sandbox.
type ExecSpec struct {
	Argv []string
	// Env is added on top of a login-like environment (HOME, USER, LOGNAME, SHELL, PATH, TERM with TTY).
	Env []string
	// Dir is the working directory; empty means the user's home.
	Dir string
	// User is a user name or numeric uid inside the sandbox; empty means root.
	User string
	// TTY gives the process a pseudo-terminal of Rows x Cols; Stdout carries its output, Stderr is nil.
	TTY        bool
	Rows, Cols uint16
}

// ExitStatus is how a process ended: Code, or Signal when it was killed by one.
type ExitStatus struct {
	Code   int
	Signal int
}

// ExitCode returns the shell-style exit code: Code, or 128+Signal.
func (s ExitStatus) ExitCode() int {
	if s.Signal != 0 {
		return 128 + s.Signal
	}
	return s.Code
}

// Process is a running exec. Stdin, Stdout and Stderr are streams the caller must drain.
type Process interface {
	Stdin() io.WriteCloser
	Stdout() io.Reader
	// Stderr is nil for a TTY process.
	Stderr() io.Reader
	// Resize changes the window size of a TTY process.
	Resize(rows, cols uint16) error
	// Signal sends sig to the process.
	Signal(sig int) error
	// Kill kills the whole process tree the exec started (its session).
	Kill() error
	// Wait returns once the process has exited and its output is drained (or ErrSandboxDied).
	Wait() (ExitStatus, error)
}

// DefaultStopGrace is how long Stop waits after SIGTERM before SIGKILL.
const DefaultStopGrace = 2 * time.Second
