// Package sandbox is the sandbox manager: the state machine and the single writer of sandbox
// state. It drives the runtime and the volume driver and records every transition in the store,
// so that after a crash Reconcile can finish or undo whatever was in flight.
package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/volume"
	"github.com/hiloop/hiloop/pkg/api"
)

// AgentUID and AgentGID own /workspace; they are the image's `agent` user.
const (
	AgentUID = 1000
	AgentGID = 1000
)

const gib = 1 << 30

// Runtime is what the manager needs of internal/runtime (an interface so tests can count calls).
type Runtime interface {
	Start(ctx context.Context, s runtime.Spec) error
	// Adopt gives a spare (started with Spec.Spare) its hostname, workspace and network.
	Adopt(ctx context.Context, id string, a runtime.AdoptSpec) error
	Stop(ctx context.Context, id string, grace time.Duration) error
	List() ([]string, error)
	RemoveLayer(layerDir string) error
	DialLoopback(ctx context.Context, id, addr string) (net.Conn, error)
	Exec(ctx context.Context, id string, p runtime.ExecSpec) (runtime.Process, error)
	// OOMKills counts the processes the kernel killed for the sandbox's memory limit since it
	// started.
	OOMKills(id string) (uint64, error)
	// Probe pings the sandbox's init within ctx's deadline.
	Probe(ctx context.Context, id string) runtime.Liveness
	// Glance says what the sandbox's init is doing without waking it.
	Glance(id string) runtime.Liveness
}

// Egress gives running sandboxes their way out (internal/gateway's Gateway, wired by the
// daemon). Without one a sandbox has loopback only.
type Egress interface {
	// Attach programs the running sandbox id's network and serves its egress under policy. It
	// is called after every start and for a sandbox found still running at a daemon start, so
	// it must take over a sandbox that is set up already.
	Attach(ctx context.Context, id, name string, policy api.Egress) error
	// Prepare makes ahead of its Attach what a spare sandbox's egress can have before the
	// sandbox has a name and a policy (the capture and its listeners); Detach drops it.
	Prepare(ctx context.Context, id string) error
	// SetPolicy makes policy the egress policy of the attached sandbox id for the connections
	// and DNS questions that come from then on; a no-op for a sandbox that is not attached.
	SetPolicy(id string, policy api.Egress) error
	// Detach stops serving the sandbox's egress and ends its connections; a no-op for a
	// sandbox that is not attached.
	Detach(id string)
	// Env is the environment every process of the attached sandbox id starts with: the proxy
	// variables, and the placeholders of the secrets attached to it. It is asked at every exec,
	// so a secret attached or detached on a running sandbox applies to its next process.
	Env(id string) []string
	// Nameserver is the resolver an attached sandbox's /etc/resolv.conf names.
	Nameserver() string
	// CACerts are the PEM certificates every sandbox trusts from its start besides its image's:
	// the CA whose leaves the egress presents to a sandbox (for hosts it terminates TLS to), and
	// the operator's (sandboxd --sandbox-ca). nil: none.
	CACerts() []byte
}

// Layers gives every running sandbox a writable root of its own size (volume.Layers, wired by
// the daemon). Without it a sandbox's writable root is a directory in the manager's layer
// directory, on the host's filesystem, unbounded.
type Layers interface {
	// Fresh gives sandbox id an empty writable root of sizeGiB, mounted, and returns the
	// directory the runtime keeps its layers in.
	Fresh(ctx context.Context, id string, sizeGiB int) (string, error)
	// Drop unmounts and deletes sandbox id's writable root; a missing one is no error.
	Drop(ctx context.Context, id string) error
	// List returns the ids of the sandboxes that have a writable root.
	List(ctx context.Context) ([]string, error)
}

// Images resolves an image name to its built root filesystem.
type Images interface {
	Get(name string) (images.Image, error)
}

// Manager owns every sandbox's lifecycle.
type Manager struct {
	store    *store.Store
	runtime  Runtime
	volumes  volume.Driver
	images   Images
	layerDir string // <data>/sandboxes: one directory per sandbox id for the runtime's layers
	log      *slog.Logger
	egress   Egress // nil: sandboxes have loopback only
	layers   Layers // nil: writable roots in layerDir, unbounded
	budget   budget
	// budgetMu is held from a budget check to the store's record of what it admitted, so two
	// calls cannot both fit in the same room.
	budgetMu sync.Mutex

	hostBudget HostBudget // nil: starts are not held to the host's kernel pools
	admitMu    sync.Mutex // one start admitted at a time

	idMu        sync.Mutex      // one assignment of a host id range at a time (idrange.go)
	hostIDFiles []string        // the host's ids and ranges no sandbox's range overlaps
	idStart     uint32          // where this daemon's search for a free range starts (idStartFor)
	heldBases   map[uint32]bool // ranges build sandboxes and spares hold (reserveIDBase), under idMu

	mu    sync.Mutex
	locks map[string]*sync.Mutex // per sandbox name: one lifecycle transition at a time
	seals map[string]*sealing    // per sandbox id: the snapshot being sealed

	spares spares // sandboxes started ahead of need (spares.go)

	onStop   []func(name string)
	onDelete []func(name, id string)
	onChange []func(name string)
}

// NewManager wires a manager. layerDir holds the runtime's per-sandbox directories.
func NewManager(st *store.Store, rt Runtime, vol volume.Driver, img Images, layerDir string, log *slog.Logger) *Manager {
	return &Manager{store: st, runtime: rt, volumes: vol, images: img, layerDir: layerDir, log: log, hostIDFiles: hostIDFiles, idStart: idStartFor(layerDir), locks: map[string]*sync.Mutex{}, seals: map[string]*sealing{}}
}

// SetEgress gives every sandbox the manager starts from now on, and every one Reconcile finds
// running, its way out through e. Call it before Reconcile.
func (m *Manager) SetEgress(e Egress) { m.egress = e }

// SetLayers gives every sandbox the manager starts from now on a bounded writable root from l.
// Call it before Reconcile.
func (m *Manager) SetLayers(l Layers) { m.layers = l }

// lock serializes transitions of one sandbox; the returned func unlocks.
func (m *Manager) lock(name string) func() {
	m.mu.Lock()
	l, ok := m.locks[name]
	if !ok {
		l = &sync.Mutex{}
		m.locks[name] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Create makes a sandbox and, unless p.NoStart, starts it. A failed create leaves nothing behind.
// What stands in its way before anything is made (an image that is not built, the room on the
// host) is refused all together, as CheckCreate says it.
func (m *Manager) Create(ctx context.Context, p api.SandboxesPost) (api.Sandbox, error) {
	ctx = context.WithoutCancel(ctx) // a client that goes away must not leave a half-made sandbox
	img, imgErr := m.image(p.Image)
	if imgErr != nil && !errors.As(imgErr, new(*api.Error)) {
		return api.Sandbox{}, imgErr
	}
	defer m.lock(p.Name)()
	rec := newRecord(ctx, p)
	// A spare gives the sandbox its id and range of host ids; else the range is chosen and the
	// record stored (once the capacity budget admits it) in one step, so no other create
	// picks it too.
	var sp spare
	var err error
	fromSpare := false
	if _, err := m.store.GetSandbox(rec.Name); imgErr == nil && errors.Is(err, store.ErrNotFound) {
		// Not for a name that is taken: a retried create would take a spare only to give it back.
		sp, fromSpare = m.takeSpare(rec, p, img)
	}
	if fromSpare {
		rec.ID, rec.IDBase = sp.id, sp.base
		if err = m.recordCreate(rec, p, imgErr); err != nil {
			m.returnSpare(sp)
		} else {
			m.releaseIDBase(sp.base) // the record holds it now
		}
	} else {
		err = m.assignIDBase(&rec, func(r *store.Sandbox) error { return m.recordCreate(*r, p, imgErr) })
	}
	if err != nil {
		if errors.Is(err, store.ErrExists) {
			return m.createdBefore(ctx, p.Name)
		}
		return api.Sandbox{}, err
	}
	if fromSpare {
		err = m.keepsVolume(ctx, rec, p)
	}
	if err == nil {
		err = m.create(ctx, &rec, p)
	}
	if err == nil {
		rec.Unanswered = false
		err = m.save(&rec)
	}
	if err != nil {
		m.undoCreate(ctx, rec)
		return api.Sandbox{}, err
	}
	return m.view(ctx, rec), nil
}

// newRecord is the record a create of p starts from, with a new id.
func newRecord(ctx context.Context, p api.SandboxesPost) store.Sandbox {
	return store.Sandbox{
		ID:           newID(),
		Name:         p.Name,
		Image:        p.Image,
		StorageClass: string(p.StorageClass),
		WorkspaceGiB: p.WorkspaceGiB,
		RootfsGiB:    cmp.Or(p.RootfsGiB, api.DefaultRootfsGiB),
		CPUs:         p.CPUs,
		MemoryMB:     p.MemoryMB,
		Policy:       string(p.PermissionPolicy),
		Egress:       storeEgress(p.Egress),
		State:        string(api.StateCreating),
		CreatedAt:    time.Now().UTC(),
		Unanswered:   true,
		Call:         store.CallOf(ctx),
	}
}

// recordCreate stores the new sandbox's record once nothing stands in its way: its image
// (imgErr, the lookup's refusal) and the room on the host (createRoom), all refused together.
// Its record is its promise. A name taken is store.ErrExists, before any budget (a retry of a
// create that was made must find it, not a refusal).
func (m *Manager) recordCreate(rec store.Sandbox, p api.SandboxesPost, imgErr error) error {
	if _, err := m.store.GetSandbox(rec.Name); err == nil {
		return store.ErrExists
	}
	m.budgetMu.Lock()
	defer m.budgetMu.Unlock()
	var ps api.Problems
	ps.Add("image", imgErr)
	m.createRoom(&ps, rec, p)
	if err := ps.Err(); err != nil {
		return err
	}
	return m.store.CreateSandbox(rec)
}

// createRoom adds to ps what the host lacks for a create of rec: the storage its workspace
// promises (a snapshot's size, if larger, when it is made from one) and, when it starts, its
// root filesystem, and a host pool's room for one more running sandbox. The start admits the
// last two again (admitStart); weighing them here refuses, before anything is made, a create
// whose start would be refused. The caller holds m.budgetMu.
func (m *Manager) createRoom(ps *api.Problems, rec store.Sandbox, p api.SandboxesPost) {
	ws := sandboxPromise(rec) // the workspace alone: rec is creating
	if p.FromSnapshot != "" {
		sn, err := m.snapshotRecord(p.FromSnapshot)
		if err != nil {
			ps.Add("from_snapshot", err)
		} else {
			ws = max(ws, sn.CapacityBytes)
		}
	}
	room, err := m.roomFor(rec.Name, !p.NoStart)
	if err != nil {
		ps.Add("", err)
		return
	}
	what := fmt.Sprintf("create sandbox %q", displayName(rec.Name))
	if err := room.storage.refusal(what, ws); err != nil {
		ps.Add("workspace_gib", err)
	} else if !p.NoStart {
		// The workspace fits: the root filesystem it would start with does not.
		ps.Add("rootfs_gib", room.storage.refusal(what+" and start it", ws+rootfsBytes(rec)))
	}
	ps.Add("", room.run)
}

// CheckCreate adds to ps, which holds the problems of p's values found already, what else
// stands in the way of creating p, without making anything: its name taken, its image not
// built, its snapshot not found, the room its workspace and root filesystem would take, a host
// pool's room to run it. A field ps refused already is not looked at again, and the room is
// weighed only for sizes that are valid. The daemon asks it for a create it refuses for its
// values, so that one answer names everything; Create weighs the same (createRoom).
func (m *Manager) CheckCreate(p api.SandboxesPost, ps *api.Problems) {
	if !ps.Has("name") && m.Exists(p.Name) {
		ps.Add("name", sandboxExists(p.Name))
	}
	if !ps.Has("image") {
		_, err := m.image(p.Image)
		ps.Add("image", err)
	}
	for _, field := range []string{"storage_class", "workspace_gib", "rootfs_gib", "from_snapshot"} {
		if ps.Has(field) {
			return
		}
	}
	m.budgetMu.Lock()
	defer m.budgetMu.Unlock()
	m.createRoom(ps, newRecord(context.Background(), p), p)
}

// createdBefore answers a create whose name is taken: with the sandbox, if this very call (a
// retry) made it and only its receipt was lost; else sandbox_exists.
func (m *Manager) createdBefore(ctx context.Context, name string) (api.Sandbox, error) {
	rec, err := m.store.GetSandbox(name)
	if err == nil && store.CallOf(ctx).Made(rec.Call) && !rec.Unanswered {
		return m.view(ctx, rec), nil
	}
	return api.Sandbox{}, sandboxExists(name)
}

func sandboxExists(name string) error {
	return api.Errorf(api.CodeSandboxExists, "sandbox %q already exists", displayName(name))
}

func (m *Manager) create(ctx context.Context, rec *store.Sandbox, p api.SandboxesPost) error {
	switch {
	case p.FromSnapshot != "":
		if err := m.fork(ctx, rec, p.FromSnapshot); err != nil {
			return err
		}
	case rec.StorageClass == string(api.StorageDurable) && !m.spareVolume(rec.ID):
		if _, err := m.volumes.Create(ctx, rec.ID, rec.WorkspaceGiB, AgentUID, AgentGID); err != nil {
			return volumeError(err, rec.WorkspaceGiB)
		}
	case rec.WorkspaceGiB != 0 && !m.volumes.Resizable():
		return volumeError(volume.ErrUnsupported, rec.WorkspaceGiB)
	}
	if err := m.setState(rec, api.StateStopped, ""); err != nil {
		return err
	}
	if !p.NoStart {
		return m.start(ctx, rec)
	}
	return nil
}

// fork makes rec's workspace a copy of a snapshot, grown to rec.WorkspaceGiB if that is larger.
func (m *Manager) fork(ctx context.Context, rec *store.Sandbox, snapName string) error {
	snapper, err := m.snapshotter()
	if err != nil {
		return err
	}
	sn, err := m.readySnapshot(snapName)
	if err != nil {
		return err
	}
	if want := int64(rec.WorkspaceGiB) * gib; want != 0 && want < sn.CapacityBytes {
		return api.Errorf(api.CodeGrowNotLarger, "snapshot %q holds a %d GiB workspace: a sandbox made from it needs at least that (omit --workspace-gib)", displayName(snapName), sn.CapacityBytes/gib)
	}
	info, err := snapper.CreateFromSnapshot(ctx, rec.ID, sn.ID, nil)
	if err != nil {
		return storageError("copy the snapshot", err)
	}
	if int64(rec.WorkspaceGiB)*gib > info.CapacityBytes {
		if _, err := m.volumes.(volume.Grower).Grow(ctx, rec.ID, rec.WorkspaceGiB); err != nil {
			return storageError("grow the workspace", err)
		}
	} else {
		rec.WorkspaceGiB = int(info.CapacityBytes / gib)
	}
	return nil
}

// undoCreate removes everything a failed create made.
func (m *Manager) undoCreate(ctx context.Context, rec store.Sandbox) {
	m.untakeSpare(rec.ID) // a spare it took and did not adopt goes with its id's teardown
	if err := m.teardown(ctx, rec); err != nil {
		m.log.Error("undo create", "sandbox", rec.Name, "err", err)
		return
	}
	if err := m.store.DeleteSandbox(rec.Name); err != nil {
		m.log.Error("undo create", "sandbox", rec.Name, "err", err)
	}
}

// teardown stops the container and deletes the volume and layers of rec; it is idempotent.
func (m *Manager) teardown(ctx context.Context, rec store.Sandbox) error {
	m.detach(rec.ID)
	if err := m.runtime.Stop(ctx, rec.ID, runtime.DefaultStopGrace); err != nil {
		return fmt.Errorf("stop container: %w", err)
	}
	if err := m.dropLayer(ctx, rec); err != nil {
		return err
	}
	if err := m.volumes.Delete(ctx, rec.ID); err != nil {
		return fmt.Errorf("delete workspace: %w", err)
	}
	if err := m.runtime.RemoveLayer(filepath.Join(m.layerDir, rec.ID)); err != nil {
		return fmt.Errorf("remove layers: %w", err)
	}
	return nil
}

// Get returns the sandbox named name.
func (m *Manager) Get(ctx context.Context, name string) (api.Sandbox, error) {
	rec, err := m.record(name)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb := []api.Sandbox{m.liveView(ctx, rec)}
	m.markRebuilt(sb)
	return sb[0], nil
}

// List returns every sandbox, sorted by name.
func (m *Manager) List(ctx context.Context) ([]api.Sandbox, error) {
	recs, err := m.store.ListSandboxes()
	if err != nil {
		return nil, err
	}
	sbs := m.liveViews(ctx, recs)
	m.markRebuilt(sbs)
	return sbs, nil
}

// Start starts a stopped or failed sandbox; starting a running one succeeds and changes nothing.
func (m *Manager) Start(ctx context.Context, name string) (api.Sandbox, error) {
	ctx = context.WithoutCancel(ctx)
	defer m.lock(name)()
	rec, err := m.record(name)
	if err != nil {
		return api.Sandbox{}, err
	}
	v, err := admit(opStart, rec)
	if err != nil {
		return api.Sandbox{}, err
	}
	if v == alreadyIfLive {
		if m.alive(rec.ID) {
			return m.view(ctx, rec), nil
		}
		// The init died under us: clean up and start afresh.
		m.log.Warn("the sandbox's init does not answer: starting it afresh", "sandbox", name)
		if err := m.stop(ctx, &rec); err != nil {
			return api.Sandbox{}, err
		}
	}
	if err := m.start(ctx, &rec); err != nil {
		return api.Sandbox{}, err
	}
	return m.view(ctx, rec), nil
}

// aliveTimeout is how long alive waits for a sandbox's init to answer.
const aliveTimeout = 2 * time.Second

// alive says whether the sandbox's container runs with its init: answering, or alive but too
// busy to answer within aliveTimeout (starved of the sandbox's CPU by its own processes, say),
// which is no reason to kill what runs in it.
func (m *Manager) alive(id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), aliveTimeout)
	defer cancel()
	return m.runtime.Probe(ctx, id) != runtime.Gone
}

func (m *Manager) start(ctx context.Context, rec *store.Sandbox) error {
	img, err := m.image(rec.Image)
	if err != nil {
		return err
	}
	// A sandbox recorded before user namespaces gets its range now; its workspace is idmapped,
	// so nothing in it changes.
	if err := m.assignIDBase(rec, m.save); err != nil {
		return err
	}
	if err := m.admitStart(rec); err != nil {
		return err
	}
	err = m.startContainer(ctx, rec, img)
	if err != nil {
		m.log.Error("start", "sandbox", rec.Name, "err", err)
		if cerr := m.stopContainer(ctx, rec); cerr != nil {
			m.log.Error("clean up failed start", "sandbox", rec.Name, "err", cerr)
		}
		_ = m.setState(rec, api.StateFailed, err.Error())
		var apiErr *api.Error
		if errors.As(err, &apiErr) {
			return apiErr
		}
		return fmt.Errorf("start sandbox %q: %w", displayName(rec.Name), err)
	}
	now := time.Now().UTC()
	rec.StartedAt = &now
	rec.StartedFrom = &store.ImageBuild{Env: slices.Clone(img.Env), WorkDir: img.WorkDir, Built: img.Built}
	return m.setState(rec, api.StateRunning, "")
}

func (m *Manager) startContainer(ctx context.Context, rec *store.Sandbox, img images.Image) error {
	if sp, ok := m.adoptable(rec.ID); ok {
		if adopted, err := m.adoptSpare(ctx, rec, sp, img); adopted || err != nil {
			return err
		}
	}
	// The workspace is made beside the root layer and the runtime's own preparation; the
	// runtime waits for it only before the container starts.
	type made struct {
		dir string
		err error
	}
	wsDone := make(chan made, 1)
	go func() {
		dir, err := m.workspace(ctx, rec)
		wsDone <- made{dir, err}
	}()
	var ws *made
	waitWorkspace := func() (string, error) {
		if ws == nil {
			w := <-wsDone
			ws = &w
		}
		return ws.dir, ws.err
	}
	// Whatever happens here, the workspace is done with before the caller cleans up.
	defer func() { _, _ = waitWorkspace() }()

	layerDir := filepath.Join(m.layerDir, rec.ID)
	if m.layers != nil {
		var err error
		if layerDir, err = m.freshLayer(ctx, *rec); err != nil {
			return err
		}
	}
	spec := runtime.Spec{
		ID:        rec.ID,
		Hostname:  displayName(rec.Name),
		ImageDir:  img.Path,
		LayerDir:  layerDir,
		Workspace: waitWorkspace,
		IDBase:    rec.IDBase,
		CPUs:      rec.CPUs,
		MemoryMB:  rec.MemoryMB,
	}
	if m.egress != nil {
		spec.Nameserver = m.egress.Nameserver()
		spec.ExtraCAs = m.egress.CACerts()
		// Beside the wait for the init, and before the sandbox is reported running: its first
		// exec already has its way out. Until then it has no route at all, so nothing leaves
		// it uncaptured.
		spec.Network = m.attachEgress(rec)
	}
	return m.runtime.Start(ctx, spec)
}

// attachEgress returns what a start or a spare's adoption runs to give rec's sandbox its way
// out under the egress policy rec has now. m.egress must not be nil.
func (m *Manager) attachEgress(rec *store.Sandbox) func(ctx context.Context) error {
	policy := EgressOf(*rec)
	return func(ctx context.Context) error {
		if err := m.egress.Attach(ctx, rec.ID, rec.Name, policy); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		return nil
	}
}

// workspace makes (if ephemeral) and mounts rec's workspace and returns its host directory.
func (m *Manager) workspace(ctx context.Context, rec *store.Sandbox) (string, error) {
	if rec.StorageClass == string(api.StorageEphemeral) {
		if _, err := m.volumes.Create(ctx, rec.ID, rec.WorkspaceGiB, AgentUID, AgentGID); err != nil {
			return "", volumeError(err, rec.WorkspaceGiB)
		}
	}
	ws, err := m.volumes.Mount(ctx, rec.ID)
	if err != nil {
		return "", fmt.Errorf("mount workspace: %w", err)
	}
	return ws, nil
}

// freshLayer gives rec an empty bounded writable root and returns its layer directory. The
// layer directory a daemon from before the limits kept on the host's filesystem goes at the
// first start that does not use it (a sandbox running from it at the upgrade keeps it until
// then).
func (m *Manager) freshLayer(ctx context.Context, rec store.Sandbox) (string, error) {
	if err := m.runtime.RemoveLayer(filepath.Join(m.layerDir, rec.ID)); err != nil {
		return "", err
	}
	dir, err := m.layers.Fresh(ctx, rec.ID, rootfsGiB(rec))
	if err != nil {
		return "", storageError("make the root filesystem", err)
	}
	return dir, nil
}

// dropLayer deletes rec's bounded writable root, if it has one: nothing of it outlives a run.
func (m *Manager) dropLayer(ctx context.Context, rec store.Sandbox) error {
	if m.layers == nil {
		return nil
	}
	if err := m.layers.Drop(ctx, rec.ID); err != nil {
		return fmt.Errorf("drop the root filesystem: %w", err)
	}
	return nil
}

// Stop stops a sandbox; stopping a stopped one succeeds and changes nothing.
func (m *Manager) Stop(ctx context.Context, name string) (api.Sandbox, error) {
	ctx = context.WithoutCancel(ctx)
	defer m.lock(name)()
	rec, err := m.record(name)
	if err != nil {
		return api.Sandbox{}, err
	}
	v, err := admit(opStop, rec)
	if err != nil {
		return api.Sandbox{}, err
	}
	if v == already {
		return m.view(ctx, rec), nil
	}
	if err := m.stop(ctx, &rec); err != nil {
		return api.Sandbox{}, err
	}
	return m.view(ctx, rec), nil
}

func (m *Manager) stop(ctx context.Context, rec *store.Sandbox) error {
	// The listeners hear of the stop before anyone can see the sandbox other than running: a
	// session turn accepted before the stop must not start the sandbox again after it. Sessions
	// into the sandbox end whether or not the teardown finishes.
	m.stopped(rec.Name)
	if err := m.setState(rec, api.StateStopping, ""); err != nil {
		return err
	}
	err := m.stopContainer(ctx, rec)
	if err != nil {
		_ = m.setState(rec, api.StateFailed, err.Error())
		return fmt.Errorf("stop sandbox %q: %w", displayName(rec.Name), err)
	}
	rec.StartedAt = nil
	return m.setState(rec, api.StateStopped, "")
}

// stopContainer stops the container and releases the workspace (dropping an ephemeral one).
func (m *Manager) stopContainer(ctx context.Context, rec *store.Sandbox) error {
	m.detach(rec.ID)
	if err := m.runtime.Stop(ctx, rec.ID, runtime.DefaultStopGrace); err != nil {
		return err // its processes may live on: the storage waits for the next try
	}
	// The root layer and the workspace are released apart: one that cannot go does not keep
	// the other mounted.
	layerErr := m.dropLayer(ctx, *rec)
	if rec.StorageClass == string(api.StorageEphemeral) {
		return errors.Join(layerErr, m.volumes.Delete(ctx, rec.ID))
	}
	return errors.Join(layerErr, m.volumes.Unmount(ctx, rec.ID))
}

// Delete stops a sandbox and removes it with its workspace; its snapshots stay unless
// withSnapshots. The whole intent is recorded before anything is removed, so that a delete a
// crash interrupts is finished whole at the next start, snapshots included, and the record goes
// last: while it is listed as deleting, something remains to be done.
func (m *Manager) Delete(ctx context.Context, name string, withSnapshots bool) error {
	ctx = context.WithoutCancel(ctx)
	var gone *store.Sandbox
	// Deferred before the lock, so it runs once the lock is released: a listener may wait for
	// work that takes it (a session's turn starting the sandbox).
	defer func() {
		if gone != nil {
			m.deleted(gone.Name, gone.ID)
		}
	}()
	defer m.lock(name)()
	rec, err := m.record(name)
	if err != nil {
		return err
	}
	if _, err := admit(opDelete, rec); err != nil {
		return err
	}
	// A retry of a delete that is still recorded keeps what it was asked to remove.
	rec.DeleteSnapshots = withSnapshots || rec.State == string(api.StateDeleting) && rec.DeleteSnapshots
	if err := m.delete(ctx, &rec); err != nil {
		return err
	}
	gone = &rec
	return nil
}

// delete records rec as deleting (with its intent, rec.DeleteSnapshots), tears it down, removes
// its snapshots when asked, and then its record.
func (m *Manager) delete(ctx context.Context, rec *store.Sandbox) error {
	if err := m.setState(rec, api.StateDeleting, ""); err != nil {
		return err
	}
	err := m.teardown(ctx, *rec)
	m.stopped(rec.Name)
	if err == nil && rec.DeleteSnapshots {
		err = m.deleteSnapshotsOf(ctx, rec.ID)
	}
	if err != nil {
		_ = m.setState(rec, api.StateFailed, err.Error())
		return fmt.Errorf("delete sandbox %q: %w", displayName(rec.Name), err)
	}
	if err := m.store.DeleteSandbox(rec.Name); err != nil {
		return err
	}
	m.changed(rec.Name)
	return nil
}

// Exec starts a process in a running sandbox.
func (m *Manager) Exec(ctx context.Context, name string, spec runtime.ExecSpec) (runtime.Process, error) {
	rec, err := m.runningRecord(name)
	if err != nil {
		return nil, err
	}
	spec = m.imageDefaults(rec, spec)
	if m.egress != nil {
		// The caller's variables come last, so they win over the egress's.
		spec.Env = append(m.egress.Env(rec.ID), spec.Env...)
	}
	p, err := m.runtime.Exec(ctx, rec.ID, spec)
	if errors.Is(err, runtime.ErrNotRunning) {
		return nil, notRunning(rec)
	}
	return p, err
}

// imageDefaults gives spec the defaults of the image build rec runs: its environment (a
// container image's ENV) first, so that the egress's variables and the caller's win over it,
// and, when spec names no directory, its WORKDIR, else /workspace. A record from before builds
// were kept at start gets the image's current build, if it still has one.
func (m *Manager) imageDefaults(rec store.Sandbox, spec runtime.ExecSpec) runtime.ExecSpec {
	build := rec.StartedFrom
	if build == nil {
		if img, err := m.images.Get(rec.Image); err == nil {
			build = &store.ImageBuild{Env: img.Env, WorkDir: img.WorkDir}
		}
	}
	if build != nil && len(build.Env) > 0 {
		spec.Env = append(slices.Clone(build.Env), spec.Env...)
	}
	if spec.Dir == "" {
		spec.Dir = api.DefaultExecWorkDir
		if build != nil && build.WorkDir != "" {
			spec.Dir = build.WorkDir
		}
	}
	return spec
}

// detach ends the sandbox id's egress, if it has one.
func (m *Manager) detach(id string) {
	if m.egress != nil {
		m.egress.Detach(id)
	}
}

// runningRecord returns the record of a sandbox that is running, else sandbox_not_running.
// CheckExec returns the error an exec in name would get for its state, from the record alone
// (no probe of the sandbox's init): the exec API answers with it before it opens the stream,
// and Exec checks again.
func (m *Manager) CheckExec(name string) error {
	_, err := m.runningRecord(name)
	return err
}

func (m *Manager) runningRecord(name string) (store.Sandbox, error) {
	rec, err := m.record(name)
	if err == nil {
		_, err = admit(opExec, rec)
	}
	return rec, err
}

func notRunning(rec store.Sandbox) error {
	state := rec.State
	if state == string(api.StateRunning) {
		state = "not answering"
	}
	return api.Errorf(api.CodeSandboxNotRunning, "sandbox %q is %s: start it with `hiloop sandbox start %s`", displayName(rec.Name), state, displayName(rec.Name))
}

func (m *Manager) record(name string) (store.Sandbox, error) {
	rec, err := m.store.GetSandbox(name)
	if errors.Is(err, store.ErrNotFound) {
		return rec, api.Errorf(api.CodeSandboxNotFound, "sandbox %q not found", displayName(name))
	}
	return rec, err
}

func (m *Manager) image(name string) (images.Image, error) {
	img, err := m.images.Get(name)
	if nf := images.NotFoundError(name, err); nf != nil {
		return img, nf
	}
	return img, err
}

// setState moves rec to state along an edge of the state machine and records it.
func (m *Manager) setState(rec *store.Sandbox, state api.SandboxState, msg string) error {
	if err := checkTransition(*rec, state); err != nil {
		m.log.Error("refused a state change", "err", err)
		return err
	}
	rec.State = string(state)
	rec.Error = msg
	return m.save(rec)
}

// save records rec as it is.
func (m *Manager) save(rec *store.Sandbox) error {
	_, err := m.store.UpdateSandbox(rec.Name, func(s *store.Sandbox) error {
		*s = *rec
		return nil
	})
	if err == nil {
		m.changed(rec.Name)
	}
	return err
}

// view turns a record into its API form, with the workspace's live capacity.
func (m *Manager) view(ctx context.Context, rec store.Sandbox) api.Sandbox {
	size := recordedGiB(rec)
	ws := api.Workspace{
		StorageClass:  api.StorageClass(rec.StorageClass),
		Driver:        m.volumes.Name(),
		CapacityBytes: int64(size) * gib,
		Resizable:     m.volumes.Resizable(),
	}
	if info, err := m.volumes.Info(ctx, rec.ID); err == nil {
		ws.CapacityBytes = info.CapacityBytes
		ws.Resizable = info.Resizable
	}
	return api.Sandbox{
		CPUs:             rec.CPUs,
		MemoryMB:         rec.MemoryMB,
		Name:             rec.Name,
		ID:               rec.ID,
		Image:            rec.Image,
		State:            api.SandboxState(rec.State),
		Workspace:        ws,
		Rootfs:           api.Rootfs{CapacityBytes: int64(rootfsGiB(rec)) * gib, Limited: m.layers != nil},
		PermissionPolicy: PolicyOf(rec),
		Egress:           EgressOf(rec),
		Error:            rec.Error,
		CreatedAt:        rec.CreatedAt,
		StartedAt:        rec.StartedAt,
		ImageBuiltAt:     builtAt(rec),
		OOMKills:         m.oomKills(rec),
	}
}

// builtAt is when the build of its image a running sandbox started from was made, or nil.
func builtAt(rec store.Sandbox) *time.Time {
	if api.SandboxState(rec.State) != api.StateRunning || rec.StartedFrom == nil || rec.StartedFrom.Built.IsZero() {
		return nil
	}
	t := rec.StartedFrom.Built
	return &t
}

// markRebuilt sets ImageRebuilt on each sandbox whose image was built again after the build it
// runs: its next start takes the new one. Each image's metadata is read once.
func (m *Manager) markRebuilt(sbs []api.Sandbox) {
	latest := map[string]time.Time{}
	for i := range sbs {
		sb := &sbs[i]
		if sb.ImageBuiltAt == nil {
			continue
		}
		built, ok := latest[sb.Image]
		if !ok {
			if img, err := m.images.Get(sb.Image); err == nil {
				built = img.Built
			}
			latest[sb.Image] = built
		}
		sb.ImageRebuilt = built.After(*sb.ImageBuiltAt)
	}
}

// recordedGiB is the workspace size rec records; 0 (not given at create) is the default.
func recordedGiB(rec store.Sandbox) int {
	if rec.WorkspaceGiB == 0 {
		return api.DefaultWorkspaceGiB
	}
	return rec.WorkspaceGiB
}

// rootfsGiB is the writable root's size limit rec records; 0 (records from before the limit)
// is the default.
func rootfsGiB(rec store.Sandbox) int { return cmp.Or(rec.RootfsGiB, api.DefaultRootfsGiB) }

// oomKills is what the kernel killed for a running sandbox's memory limit since it started; 0
// when it is not running or the count cannot be read.
func (m *Manager) oomKills(rec store.Sandbox) uint64 {
	if rec.State != string(api.StateRunning) {
		return 0
	}
	n, _ := m.runtime.OOMKills(rec.ID)
	return n
}

// OOMKills counts the processes the kernel killed for the memory limit of the running sandbox
// name since it started: exec compares it before and after a command that died of SIGKILL.
func (m *Manager) OOMKills(name string) (uint64, error) {
	rec, err := m.runningRecord(name)
	if err != nil {
		return 0, err
	}
	return m.runtime.OOMKills(rec.ID)
}

// PolicyOf returns a sandbox's permission policy.
func PolicyOf(rec store.Sandbox) api.PermissionPolicy {
	if rec.Policy == "" {
		return api.PolicyAutoApprove
	}
	return api.PermissionPolicy(rec.Policy)
}

// EgressOf returns a sandbox's egress policy; a record without one is open.
func EgressOf(rec store.Sandbox) api.Egress {
	if rec.Egress == nil {
		return api.Egress{Mode: api.EgressOpen}
	}
	return api.Egress{Mode: api.EgressMode(rec.Egress.Mode), Allow: rec.Egress.Allow, Deny: rec.Egress.Deny}
}

// storeEgress is p as the store keeps it; nil stays nil (open).
func storeEgress(p *api.Egress) *store.Egress {
	if p == nil {
		return nil
	}
	return &store.Egress{Mode: string(p.Mode), Allow: p.Allow, Deny: p.Deny}
}

// SetEgressPolicy replaces a sandbox's egress policy with p, which the caller has normalised.
// A running sandbox's new connections and DNS questions follow it at once; connections
// already carried go on. The change is stored, so it outlives a stop and a daemon restart.
func (m *Manager) SetEgressPolicy(ctx context.Context, name string, p api.Egress) (api.Sandbox, error) {
	ctx = context.WithoutCancel(ctx)
	defer m.lock(name)()
	rec, err := m.record(name)
	if err != nil {
		return api.Sandbox{}, err
	}
	if _, err := admit(opEgress, rec); err != nil {
		return api.Sandbox{}, err
	}
	old := EgressOf(rec)
	live := m.egress != nil && rec.State == string(api.StateRunning)
	if live {
		if err := m.egress.SetPolicy(rec.ID, p); err != nil {
			return api.Sandbox{}, fmt.Errorf("egress policy of %q: %w", displayName(name), err)
		}
	}
	rec.Egress = storeEgress(&p)
	if err := m.save(&rec); err != nil {
		if live {
			// Not stored, so not in force either: the old policy is what a restart would apply.
			if rerr := m.egress.SetPolicy(rec.ID, old); rerr != nil {
				m.log.Error("restore the egress policy after a failed store", "sandbox", name, "err", rerr)
			}
		}
		return api.Sandbox{}, err
	}
	return m.view(ctx, rec), nil
}

func volumeError(err error, sizeGiB int) error {
	if errors.Is(err, volume.ErrUnsupported) {
		return api.Errorf(api.CodeUnsupported, "this deployment's workspace volumes have a fixed size: omit --workspace-gib (asked for %d GiB)", sizeGiB)
	}
	return storageError("create the workspace", err)
}

func isENOSPC(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "No space left on device")
}

func newID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// Exists reports whether a sandbox named name exists, in any state.
func (m *Manager) Exists(name string) bool {
	_, err := m.store.GetSandbox(name)
	return err == nil
}

// DialLoopback dials addr (127.0.0.1:PORT, [::1]:PORT or localhost:PORT) on the loopback of a
// running sandbox, from inside its network namespace.
func (m *Manager) DialLoopback(ctx context.Context, name, addr string) (net.Conn, error) {
	rec, err := m.runningRecord(name)
	if err != nil {
		return nil, err
	}
	conn, err := m.runtime.DialLoopback(ctx, rec.ID, addr)
	if errors.Is(err, runtime.ErrNotRunning) {
		return nil, notRunning(rec)
	}
	return conn, err
}

// OnStop registers fn to be called with a sandbox's name as it begins to stop, and after it is
// deleted (the SSH endpoint ends that sandbox's sessions then).
func (m *Manager) OnStop(fn func(name string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onStop = append(m.onStop, fn)
}

func (m *Manager) stopped(name string) {
	m.mu.Lock()
	fns := m.onStop
	m.mu.Unlock()
	for _, fn := range fns {
		fn(name)
	}
}

// OnDelete registers fn to be called with a sandbox's name and id once Delete has removed it,
// after the stop listeners and outside the sandbox's lock (the session service deletes the
// sandbox's sessions then). The sandbox is gone whatever fn does, so fn handles its own failures;
// a delete finished by Reconcile at boot notifies no one: what depends on sandboxes checks for
// the missing ones when it starts.
func (m *Manager) OnDelete(fn func(name, id string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onDelete = append(m.onDelete, fn)
}

func (m *Manager) deleted(name, id string) {
	m.mu.Lock()
	fns := m.onDelete
	m.mu.Unlock()
	for _, fn := range fns {
		fn(name, id)
	}
}

// OnChange registers fn to be called with a sandbox's name each time its record changes (a
// state, a setting) or goes. fn runs under the sandbox's lock: it must return at once and must
// not call the manager (a node agent queues the name and reads the sandbox later).
func (m *Manager) OnChange(fn func(name string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onChange = append(m.onChange, fn)
}

func (m *Manager) changed(name string) {
	m.mu.Lock()
	fns := m.onChange
	m.mu.Unlock()
	for _, fn := range fns {
		fn(name)
	}
}
