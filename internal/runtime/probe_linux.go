//go:build linux

package runtime

import (
	"context"
	"errors"
	"os"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// Probe pings the sandbox's init within ctx's deadline and says what it found. A ping that
// times out while the container's init lives is Unresponsive, not Gone: a sandbox starved by
// its own fork bomb still runs, and a caller listing many sandboxes must not wait on it.
func (r *Runtime) Probe(ctx context.Context, id string) Liveness {
	if validID(id) != nil {
		return Gone
	}
	c, err := libcontainer.Load(r.cfg.StateDir, id)
	if err != nil {
		return Gone
	}
	if st, err := c.Status(); err != nil || st != libcontainer.Running {
		return Gone
	}
	err = r.ping(ctx, id)
	switch {
	case err == nil:
		return Answering
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, unix.EAGAIN): // a full backlog: the init lives but does not accept
		return Unresponsive
	}
	return Gone
}
