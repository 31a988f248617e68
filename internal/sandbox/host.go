package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// HostBudget admits sandbox starts against the host-wide kernel pools (pids, threads, ptys)
// every running sandbox takes a fixed share of (internal/daemon's host limits).
type HostBudget interface {
	// AdmitStart returns nil when one more sandbox may run beside running others, else an
	// *api.Error (host_limit_reached) saying which pool is full.
	AdmitStart(running int) error
}

// SetHostBudget makes every start from now on, a create's included, ask b first. Call it
// before Reconcile.
func (m *Manager) SetHostBudget(b HostBudget) { m.hostBudget = b }

// admitStart moves rec to starting if the host budget has room for one more running sandbox and
// the capacity budget for its root filesystem (and an ephemeral workspace); when neither has,
// the refusal says both.
// Starts are admitted one at a time, so two cannot both take the last room; a refused start
// leaves rec as it was.
func (m *Manager) admitStart(rec *store.Sandbox) error {
	m.admitMu.Lock()
	defer m.admitMu.Unlock()
	// Its root filesystem's layer is made now, and an ephemeral workspace too (promised since
	// the create, but the room may have gone since): held until the state records the promise.
	m.budgetMu.Lock()
	defer m.budgetMu.Unlock()
	what := fmt.Sprintf("start sandbox %q", displayName(rec.Name))
	if rec.StorageClass == string(api.StorageEphemeral) {
		what += ", whose ephemeral workspace is made at every start"
	}
	room, err := m.roomFor(rec.Name, true)
	if err != nil {
		return err
	}
	var ps api.Problems
	ps.Add("", room.storage.refusal(what, rootfsBytes(*rec)))
	ps.Add("", room.run)
	if err := ps.Err(); err != nil {
		return err
	}
	return m.setState(rec, api.StateStarting, "")
}

// hostRoom is the room the host has for one more sandbox.
type hostRoom struct {
	storage *storageRoom // the capacity budget; nil when nothing is budgeted
	run     error        // the host budget's refusal to run it (host_limit_reached), or nil
}

// roomFor reads every record once to weigh sandbox name against the capacity budget and, when
// run, to ask the host budget whether it may run beside the others that may be running.
func (m *Manager) roomFor(name string, run bool) (hostRoom, error) {
	run = run && m.hostBudget != nil
	if len(m.budget.pools) == 0 && !run {
		return hostRoom{}, nil
	}
	recs, err := m.store.ListSandboxes()
	if err != nil {
		return hostRoom{}, err
	}
	var room hostRoom
	if room.storage, err = m.storageRoom(recs); err != nil || !run {
		return room, err
	}
	running := 0
	for _, r := range recs {
		if r.Name != name && holdsHostShare(api.SandboxState(r.State)) {
			running++
		}
	}
	room.run = m.hostBudget.AdmitStart(running)
	return room, nil
}

// holdsHostShare tells the states whose sandbox may have processes: from the start's admission
// until its stop has finished.
func holdsHostShare(s api.SandboxState) bool {
	return s == api.StateStarting || s == api.StateRunning || s == api.StateStopping
}

// probeTimeout is how long get waits for a sandbox's init to answer; one that does not
// is reported unresponsive rather than waited for.
const probeTimeout = 500 * time.Millisecond

// listParallel bounds the sandboxes a list looks at at once.
const listParallel = 64

// liveView is view with the truth about a sandbox recorded as running: one whose init is gone
// (killed from the host, say) is reported failed until a start brings it back; one whose init
// does not answer within probeTimeout (starved by a fork bomb) stays running, marked
// unresponsive. It pings the init (runtime.Probe).
func (m *Manager) liveView(ctx context.Context, rec store.Sandbox) api.Sandbox {
	return m.liveViewBy(ctx, rec, func(id string) runtime.Liveness {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		return m.runtime.Probe(pctx, id)
	})
}

// liveViewBy is liveView with look telling what the sandbox's init is doing.
func (m *Manager) liveViewBy(ctx context.Context, rec store.Sandbox, look func(id string) runtime.Liveness) api.Sandbox {
	sb := m.view(ctx, rec)
	if sb.State != api.StateRunning {
		return sb
	}
	switch look(rec.ID) {
	case runtime.Gone:
		sb.State = api.StateFailed
		sb.Error = "the sandbox's init is gone: `hiloop sandbox start " + displayName(rec.Name) + "` starts it again"
	case runtime.Unresponsive:
		sb.Unresponsive = true
	}
	return sb
}

// liveViews is liveView of every record, but glancing at each init (runtime.Glance) instead of
// pinging it: a list of 1,000 sandboxes that pinged every init had each of them scheduled to
// answer, 669 ms on this 2-core machine. A stopped init is unresponsive at a glance; one starved
// by its own processes shows once a get (or a start) has pinged it. The records are looked at
// in parallel: their workspaces and cgroups are files to read.
func (m *Manager) liveViews(ctx context.Context, recs []store.Sandbox) []api.Sandbox {
	out := make([]api.Sandbox, len(recs))
	atOnce(len(recs), listParallel, func(i int) {
		out[i] = m.liveViewBy(ctx, recs[i], m.runtime.Glance)
	})
	return out
}

// atOnce calls fn(0) to fn(n-1), at most limit of them running at a time, and returns once all
// have returned.
func atOnce(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}
