package soak

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

const gib = 1 << 30

// maxGiB bounds how far a workspace grows, maxSandboxes and maxSnapshots what one client keeps.
const (
	maxGiB       = 3
	maxSandboxes = 4
	maxSnapshots = 4
)

// sandboxModel is what was acknowledged about one sandbox.
type sandboxModel struct {
	name, id  string
	capGiB    int
	running   bool
	startedAt time.Time
	// markers were written by an acknowledged exec and must be in /workspace/m; maybe were
	// written by an exec whose answer was lost and may be there. Nothing else may.
	markers, maybe map[string]bool
	session        *sessionModel
}

// snapshotModel is what was acknowledged about one snapshot: the workspace it holds.
type snapshotModel struct {
	name, id, sandbox string
	capGiB            int
	markers, maybe    map[string]bool
}

// sessionModel is what was acknowledged about one session: its prompts by seq.
type sessionModel struct {
	id      string
	prompts map[uint64]string
	maybe   map[string]bool // prompts whose answer was lost
}

// receipt is an acknowledged call to repeat with its key: the answer must name the same thing.
type receipt struct {
	desc   string
	want   string
	replay func(ctx context.Context) (string, error)
}

// op is one call of the workload. Its idempotency key is chosen once, so a retry after a kill
// repeats the same request.
type op struct {
	kind, desc string
	key        string
	// call sends the request and, on success, applies it to the model.
	call func(ctx context.Context, key client.CallOption) error
	// refused handles the daemon's refusal and says whether it was expected; nil: none is.
	refused func(ctx context.Context, err error) bool
	// lost is called when the answer is lost and the call cannot be repeated (exec).
	lost func()
	// What a pending (unanswered) call may have changed, for the checks.
	sandbox    string // the sandbox it acts on
	snapshot   string // the snapshot it makes or deletes
	creates    bool   // sandbox may now exist
	deletes    bool   // sandbox (and with snapshots, its snapshots) may be gone
	withSnaps  bool
	runChange  bool // sandbox may be running or stopped
	growTo     int
	restoreTo  *snapshotModel
	attempts   int
	delSnap    bool // snapshot may be gone
	makesSnap  bool // snapshot may now exist
	newSession bool // a session may now exist
}

// worker is one client: it owns the sandboxes and snapshots it names (w<i>-…, w<i>s…), so
// that its model is exact between kills.
type worker struct {
	s   *soak
	i   int
	rng *rand.Rand
	seq int

	sbs      map[string]*sandboxModel
	snaps    map[string]*snapshotModel
	receipts []receipt
	pending  *op
}

func newWorker(s *soak, i int) *worker {
	return &worker{s: s, i: i, rng: rand.New(rand.NewPCG(s.cfg.Seed, uint64(i)+1)),
		sbs: map[string]*sandboxModel{}, snaps: map[string]*snapshotModel{}}
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		o := w.pending
		if o == nil {
			o = w.next()
		}
		if !w.send(ctx, o) {
			_ = sleep(ctx, 50*time.Millisecond) // the daemon is down: wait for the restart
		}
	}
}

// settle repeats a pending call until it has an answer.
func (w *worker) settle(ctx context.Context) {
	for w.pending != nil && ctx.Err() == nil {
		if !w.send(ctx, w.pending) {
			_ = sleep(ctx, 50*time.Millisecond)
		}
	}
}

// send sends one call and files its outcome; it returns false when the answer was lost.
func (w *worker) send(ctx context.Context, o *op) bool {
	w.s.gate.RLock()
	defer w.s.gate.RUnlock()
	if ctx.Err() != nil {
		return true
	}
	w.s.started(o.desc)
	w.s.count(o.kind)
	if o.attempts > 0 {
		w.s.add(&w.s.report.Retried)
	}
	// The run's end must not cut a call short: that would look like a kill.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	err := o.call(octx, client.WithIdempotencyKey(o.key))
	if w.s.cfg.Trace {
		w.s.cfg.Logf("w%d %s (try %d): %v", w.i, o.desc, o.attempts+1, err)
	}
	switch {
	case err == nil:
		w.pending = nil
	case definite(err):
		w.pending = nil
		if o.refused == nil || !o.refused(octx, err) {
			w.s.violate("refused", "%s (key %s, try %d): %v", o.desc, o.key, o.attempts+1, err)
			w.resync(octx, o)
		}
	default:
		if o.attempts == 0 {
			w.s.add(&w.s.report.Interrupted)
		}
		o.attempts++
		if o.lost != nil {
			o.lost()
			w.pending = nil
			return false
		}
		w.pending = o
		if o.attempts > 40 {
			w.s.violate("no answer", "%s (key %s): %d tries, last: %v", o.desc, o.key, o.attempts, err)
			w.pending = nil
			w.resync(octx, o)
		}
		return false
	}
	return true
}

// next chooses the next call from what the worker has.
func (w *worker) next() *op {
	names := slices.Sorted(maps.Keys(w.sbs))
	var running, stopped []string
	for _, n := range names {
		if w.sbs[n].running {
			running = append(running, n)
		} else {
			stopped = append(stopped, n)
		}
	}
	snaps := slices.Sorted(maps.Keys(w.snaps))
	pick := func(l []string) string { return l[w.rng.IntN(len(l))] }
	r := w.rng.IntN(100)
	switch {
	case len(names) < 2 || len(names) < maxSandboxes && r < 6:
		if len(snaps) > 0 && w.rng.IntN(3) == 0 {
			return w.fork(w.snaps[pick(snaps)])
		}
		return w.create()
	case r < 34:
		if len(running) == 0 {
			return w.start(pick(stopped))
		}
		return w.write(pick(running))
	case r < 46:
		if len(stopped) > 0 && (len(running) == 0 || w.rng.IntN(2) == 0) {
			return w.start(pick(stopped))
		}
		return w.stop(pick(running))
	case r < 53:
		n := pick(names)
		if w.sbs[n].capGiB >= maxGiB {
			return w.use(n)
		}
		return w.grow(n)
	case r < 64:
		if len(snaps) >= maxSnapshots {
			return w.deleteSnapshot(pick(snaps))
		}
		return w.snapshot(pick(names))
	case r < 70 && len(snaps) > 0 && len(names) < maxSandboxes:
		return w.fork(w.snaps[pick(snaps)])
	case r < 77:
		n := pick(names)
		var own []string
		for _, sn := range snaps {
			if w.snaps[sn].sandbox == n && w.snaps[sn].id != "" {
				own = append(own, sn)
			}
		}
		switch {
		case len(own) == 0:
			return w.snapshot(n)
		case w.sbs[n].running:
			return w.stop(n)
		}
		return w.restore(n, w.snaps[pick(own)])
	case r < 84:
		return w.delete(pick(names), w.rng.IntN(2) == 0)
	case r < 96:
		if len(running) == 0 {
			return w.start(pick(stopped))
		}
		return w.prompt(pick(running))
	case len(snaps) > 0:
		return w.deleteSnapshot(pick(snaps))
	}
	return w.use(pick(names))
}

// use writes a marker in a running sandbox and starts a stopped one: an exec in a sandbox the
// model holds stopped is refused, rightly.
func (w *worker) use(name string) *op {
	if w.sbs[name].running {
		return w.write(name)
	}
	return w.start(name)
}

func (w *worker) name(kind string) string {
	w.seq++
	return fmt.Sprintf("w%d%s%d", w.i, kind, w.seq)
}

// remember keeps an acknowledged call for the checks to repeat.
func (w *worker) remember(r receipt) {
	w.receipts = append(w.receipts, r)
	if len(w.receipts) > 4 {
		w.receipts = w.receipts[1:]
	}
}

// expect records a violation if an answer disagrees with the model.
func (w *worker) expect(desc string, sb api.Sandbox, m *sandboxModel) {
	want := api.StateStopped
	if m.running {
		want = api.StateRunning
	}
	if sb.State != want || sb.Workspace.CapacityBytes != int64(m.capGiB)*gib {
		w.s.violate("answer", "%s answered %s with %d bytes, want %s with %d GiB", desc, sb.State, sb.Workspace.CapacityBytes, want, m.capGiB)
	}
}

func (w *worker) create() *op {
	name := w.name("-")
	p := api.SandboxesPost{Name: name, Image: w.s.cfg.Image, WorkspaceGiB: 1}
	return w.createFrom("create", p, nil)
}

func (w *worker) fork(sn *snapshotModel) *op {
	p := api.SandboxesPost{Name: w.name("-"), Image: w.s.cfg.Image, FromSnapshot: sn.name}
	return w.createFrom("fork", p, sn)
}

// createFrom creates a sandbox, from a snapshot if sn is not nil.
func (w *worker) createFrom(kind string, p api.SandboxesPost, sn *snapshotModel) *op {
	key := client.NewIdempotencyKey()
	desc := fmt.Sprintf("%s %s", kind, p.Name)
	if sn != nil {
		desc += " from " + sn.name
	}
	o := &op{kind: kind, desc: desc, key: key, sandbox: p.Name, creates: true}
	// created files the sandbox; a receipt is remembered only for an answer the daemon gave.
	created := func(ctx context.Context, sb api.Sandbox, answered bool) {
		m := &sandboxModel{name: p.Name, id: sb.ID, capGiB: 1, running: true, markers: map[string]bool{}, maybe: map[string]bool{}}
		if sn != nil {
			m.capGiB, m.markers, m.maybe = sn.capGiB, maps.Clone(sn.markers), maps.Clone(sn.maybe)
		}
		if sb.StartedAt != nil {
			m.startedAt = *sb.StartedAt
		}
		w.sbs[p.Name] = m
		w.expect(desc, sb, m)
		if answered {
			w.remember(receipt{desc: desc, want: sb.ID, replay: func(ctx context.Context) (string, error) {
				sb, err := w.s.c.CreateSandbox(ctx, p, client.WithIdempotencyKey(key))
				return sb.ID, err
			}})
		}
		if sn != nil {
			w.verify(ctx, desc, m)
		}
	}
	o.call = func(ctx context.Context, k client.CallOption) error {
		sb, err := w.s.c.CreateSandbox(ctx, p, k)
		if err == nil {
			created(ctx, sb, true)
		}
		return err
	}
	o.refused = func(ctx context.Context, err error) bool {
		sb, gerr := w.s.c.GetSandbox(ctx, p.Name)
		if !w.s.receiptGap(o, err, api.CodeSandboxExists, gerr) {
			return false
		}
		created(ctx, sb, false)
		return true
	}
	return o
}

// verify checks a running sandbox's markers right after the call that set them (fork, start).
func (w *worker) verify(ctx context.Context, desc string, m *sandboxModel) {
	found, err := w.s.markers(ctx, m.name)
	if err != nil {
		if definite(err) {
			w.s.violate("markers", "after %s: %v", desc, err)
		}
		return // the daemon was killed: the checks after the restart look again
	}
	w.s.compareMarkers("after "+desc, m, found)
}

func (w *worker) write(name string) *op {
	marker := fmt.Sprintf("m%d-%d", w.i, w.seq+1)
	w.seq++
	m := w.sbs[name]
	o := &op{kind: "exec", desc: fmt.Sprintf("exec in %s writing %s", name, marker), sandbox: name}
	o.call = func(ctx context.Context, _ client.CallOption) error {
		res, err := w.s.c.Exec(ctx, name, api.ExecRequest{Command: []string{"sh", "-c", "mkdir -p /workspace/m && echo " + marker + " > /workspace/m/" + marker}}, client.ExecIO{})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			w.s.violate("exec", "%s exited %d", o.desc, res.ExitCode)
			m.maybe[marker] = true
			return nil
		}
		m.markers[marker] = true
		return nil
	}
	o.lost = func() { m.maybe[marker] = true }
	return o
}

func (w *worker) start(name string) *op {
	m := w.sbs[name]
	o := &op{kind: "start", desc: "start " + name, key: client.NewIdempotencyKey(), sandbox: name, runChange: true}
	o.call = func(ctx context.Context, k client.CallOption) error {
		sb, err := w.s.c.StartSandbox(ctx, name, k)
		if err != nil {
			return err
		}
		m.running = true
		if sb.StartedAt != nil {
			m.startedAt = *sb.StartedAt
		}
		w.expect(o.desc, sb, m)
		w.verify(ctx, o.desc, m)
		return nil
	}
	return o
}

func (w *worker) stop(name string) *op {
	m := w.sbs[name]
	o := &op{kind: "stop", desc: "stop " + name, key: client.NewIdempotencyKey(), sandbox: name, runChange: true}
	o.call = func(ctx context.Context, k client.CallOption) error {
		sb, err := w.s.c.StopSandbox(ctx, name, k)
		if err != nil {
			return err
		}
		m.running, m.startedAt = false, time.Time{}
		w.expect(o.desc, sb, m)
		return nil
	}
	return o
}

func (w *worker) grow(name string) *op {
	m := w.sbs[name]
	to := m.capGiB + 1
	o := &op{kind: "grow", desc: fmt.Sprintf("grow %s to %d GiB", name, to), key: client.NewIdempotencyKey(), sandbox: name, growTo: to}
	o.call = func(ctx context.Context, k client.CallOption) error {
		sb, err := w.s.c.GrowSandbox(ctx, name, to, k)
		if err != nil {
			return err
		}
		m.capGiB = to
		w.expect(o.desc, sb, m)
		return nil
	}
	o.refused = func(ctx context.Context, err error) bool {
		sb, gerr := w.s.c.GetSandbox(ctx, name)
		if gerr == nil && sb.Workspace.CapacityBytes != int64(to)*gib {
			return false
		}
		if !w.s.receiptGap(o, err, api.CodeGrowNotLarger, gerr) {
			return false
		}
		m.capGiB = to
		return true
	}
	return o
}

func (w *worker) snapshot(name string) *op {
	m := w.sbs[name]
	snap := w.name("s")
	key := client.NewIdempotencyKey()
	p := api.SnapshotsPost{Name: snap}
	o := &op{kind: "snapshot", desc: fmt.Sprintf("snapshot %s of %s", snap, name), key: key, sandbox: name, snapshot: snap, makesSnap: true}
	// made files the snapshot; a receipt is remembered only for an answer the daemon gave.
	made := func(sn api.Snapshot, answered bool) {
		w.snaps[snap] = &snapshotModel{name: snap, id: sn.ID, sandbox: name, capGiB: m.capGiB, markers: maps.Clone(m.markers), maybe: maps.Clone(m.maybe)}
		if sn.State != api.SnapshotReady || sn.CapacityBytes != int64(m.capGiB)*gib {
			w.s.violate("answer", "%s answered %s with %d bytes, want ready with %d GiB", o.desc, sn.State, sn.CapacityBytes, m.capGiB)
		}
		if answered {
			w.remember(receipt{desc: o.desc, want: sn.ID, replay: func(ctx context.Context) (string, error) {
				sn, err := w.s.c.CreateSnapshot(ctx, name, p, client.WithIdempotencyKey(key))
				return sn.ID, err
			}})
		}
	}
	o.call = func(ctx context.Context, k client.CallOption) error {
		sn, err := w.s.c.CreateSnapshot(ctx, name, p, k)
		if err == nil {
			made(sn, true)
		}
		return err
	}
	o.refused = func(ctx context.Context, err error) bool {
		sn, gerr := w.s.c.GetSnapshot(ctx, snap)
		if !w.s.receiptGap(o, err, api.CodeSnapshotExists, gerr) {
			return false
		}
		made(sn, false)
		return true
	}
	return o
}

func (w *worker) restore(name string, sn *snapshotModel) *op {
	m := w.sbs[name]
	o := &op{kind: "restore", desc: fmt.Sprintf("restore %s to %s", name, sn.name), key: client.NewIdempotencyKey(), sandbox: name, restoreTo: sn}
	o.call = func(ctx context.Context, k client.CallOption) error {
		sb, err := w.s.c.RestoreSandbox(ctx, name, sn.name, k)
		if err != nil {
			return err
		}
		// XFS cannot shrink: a snapshot of a smaller workspace keeps the larger size.
		m.capGiB, m.markers, m.maybe = max(m.capGiB, sn.capGiB), maps.Clone(sn.markers), maps.Clone(sn.maybe)
		w.expect(o.desc, sb, m)
		return nil
	}
	return o
}

func (w *worker) delete(name string, withSnaps bool) *op {
	desc := "delete " + name
	if withSnaps {
		desc += " --with-snapshots"
	}
	o := &op{kind: "delete", desc: desc, key: client.NewIdempotencyKey(), sandbox: name, deletes: true, withSnaps: withSnaps}
	gone := func() {
		delete(w.sbs, name)
		if withSnaps {
			maps.DeleteFunc(w.snaps, func(_ string, sn *snapshotModel) bool { return sn.sandbox == name })
		}
	}
	o.call = func(ctx context.Context, k client.CallOption) error {
		if err := w.s.c.DeleteSandbox(ctx, name, withSnaps, k); err != nil {
			return err
		}
		gone()
		return nil
	}
	// A delete the restart finished is gone when repeated; the checks see that all of it went.
	o.refused = func(_ context.Context, err error) bool {
		if o.attempts > 0 && isCode(err, api.CodeSandboxNotFound) {
			gone()
			return true
		}
		return false
	}
	return o
}

func (w *worker) deleteSnapshot(snap string) *op {
	o := &op{kind: "snapshot-delete", desc: "delete snapshot " + snap, key: client.NewIdempotencyKey(), snapshot: snap, delSnap: true}
	o.call = func(ctx context.Context, k client.CallOption) error {
		if err := w.s.c.DeleteSnapshot(ctx, snap, k); err != nil {
			return err
		}
		delete(w.snaps, snap)
		return nil
	}
	o.refused = func(_ context.Context, err error) bool {
		if o.attempts > 0 && isCode(err, api.CodeSnapshotNotFound) {
			delete(w.snaps, snap)
			return true
		}
		return false
	}
	return o
}

// prompt opens a session in a sandbox that has none, else prompts its session.
func (w *worker) prompt(name string) *op {
	m := w.sbs[name]
	if m.session == nil {
		p := api.SessionsPost{Sandbox: name, Harness: "fake"}
		o := &op{kind: "session", desc: "session new in " + name, key: client.NewIdempotencyKey(), sandbox: name, newSession: true}
		o.call = func(ctx context.Context, k client.CallOption) error {
			se, err := w.s.c.CreateSession(ctx, p, k)
			if err != nil {
				return err
			}
			m.session = &sessionModel{id: se.ID, prompts: map[uint64]string{}, maybe: map[string]bool{}}
			return nil
		}
		return o
	}
	se := m.session
	w.seq++
	text := fmt.Sprintf("p%d-%d", w.i, w.seq)
	o := &op{kind: "prompt", desc: fmt.Sprintf("prompt %q in session %s of %s", text, se.id, name), key: client.NewIdempotencyKey(), sandbox: name}
	o.call = func(ctx context.Context, k client.CallOption) error {
		a, err := w.s.c.Prompt(ctx, se.id, api.PromptPost{Text: text}, k)
		if err != nil {
			return err
		}
		se.prompts[a.Seq] = text
		w.awaitTurn(ctx, se.id)
		return nil
	}
	o.refused = func(_ context.Context, err error) bool {
		if isCode(err, api.CodeTurnInProgress) {
			if o.attempts > 0 {
				se.maybe[text] = true
			}
			return true
		}
		return false
	}
	return o
}

// awaitTurn waits (a few seconds at most) for a session's turn to end, as `hiloop session
// prompt` does. A stop that comes sooner wins over the turn if it has not started the harness
// yet. A kill meanwhile ends the wait; the restart ends the turn.
func (w *worker) awaitTurn(ctx context.Context, id string) {
	for range 100 {
		se, err := w.s.c.GetSession(ctx, id)
		if err != nil || se.State == api.SessionIdle {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// resync takes the model of what o touched from the daemon after a violation, so that one
// fault is reported once rather than at every later check.
func (w *worker) resync(ctx context.Context, o *op) {
	if o.snapshot != "" {
		if _, err := w.s.c.GetSnapshot(ctx, o.snapshot); isCode(err, api.CodeSnapshotNotFound) {
			delete(w.snaps, o.snapshot)
		} else if err == nil && w.snaps[o.snapshot] == nil {
			// Made, but its content is unknown: out of the way with it.
			if err := w.s.c.DeleteSnapshot(ctx, o.snapshot); err != nil {
				w.s.violate("resync", "delete snapshot %s: %v", o.snapshot, err)
			}
		}
	}
	if o.sandbox == "" {
		return
	}
	sb, err := w.s.c.GetSandbox(ctx, o.sandbox)
	if isCode(err, api.CodeSandboxNotFound) {
		delete(w.sbs, o.sandbox)
		return
	}
	if err != nil {
		return
	}
	m := w.sbs[o.sandbox]
	if m == nil {
		m = &sandboxModel{name: sb.Name, markers: map[string]bool{}, maybe: map[string]bool{}}
		w.sbs[sb.Name] = m
	}
	m.id, m.capGiB, m.running = sb.ID, int(sb.Workspace.CapacityBytes/gib), sb.State == api.StateRunning
	if sb.StartedAt != nil {
		m.startedAt = *sb.StartedAt
	}
	if found, err := w.s.markers(ctx, sb.Name); m.running && err == nil {
		m.markers, m.maybe = found, map[string]bool{}
	} else {
		maps.Copy(m.maybe, m.markers)
		m.markers = map[string]bool{}
	}
}
