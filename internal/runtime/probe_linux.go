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
	l := r.probe(ctx, id)
	r.noteProbe(id, l)
	return l
}

func (r *Runtime) probe(ctx context.Context, id string) Liveness {
	// The ping comes first: an init that answers on the sandbox's socket lives, and asking
	// libcontainer first (decoding the container's state, some 30 KiB of JSON with the
	// seccomp filter, and checking its init in /proc) cost a list of 1,000 sandboxes seconds
	// of CPU. Only a ping that fails needs the container's state to tell why.
	err := r.ping(ctx, id)
	if err == nil {
		return Answering
	}
	c, lerr := libcontainer.Load(r.cfg.StateDir, id)
	if lerr != nil {
		return Gone
	}
	if st, serr := c.Status(); serr != nil || st != libcontainer.Running {
		return Gone
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, unix.EAGAIN): // a full backlog: the init lives but does not accept
		return Unresponsive
	}
	return Gone
}
