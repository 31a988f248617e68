//go:build linux

package runtime

import (
	"os"
	goruntime "runtime"

	"github.com/opencontainers/runc/libcontainer"
	// The devices cgroup v1 controller is only set up when this is linked in.
	_ "github.com/opencontainers/cgroups/devices"
	// nsenter's cgo constructor joins namespaces before the Go runtime starts in "init".
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// Pin the main goroutine to the main thread. libcontainer opens mount sources from a locked
// thread that joins a new container's mount namespace and is thrown away afterwards; if that
// ever ran on the main thread, which Go cannot throw away, the whole daemon's main thread would
// stay in that namespace and pin its mounts (a stopped sandbox's workspace would stay busy).
func init() { goruntime.LockOSThread() }

// MaybeInit turns this process into libcontainer's container init when it was started as one
// ("<self> init"), and then never returns. The daemon's main must call it first thing: the
// runtime re-executes the daemon binary to set up each sandbox.
func MaybeInit() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
}
