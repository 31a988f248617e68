package sandbox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/volume"
)

// callLog counts the calls that change something, by "runtime.Start"-style name, across the
// fakes of one manager, and fails the ones a test names.
type callLog struct {
	mu    sync.Mutex
	calls map[string]int
	fail  map[string]error
}

func (l *callLog) call(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[name]++
	return l.fail[name]
}

// take returns the calls counted since the last take and starts counting afresh.
func (l *callLog) take() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = map[string]int{}
	return c
}

// failNext makes every later call of name return err.
func (l *callLog) failNext(name string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail[name] = err
}

// fakeRuntime runs nothing: it remembers which sandboxes it started.
type fakeRuntime struct {
	log      *callLog
	mu       sync.Mutex
	running  map[string]bool
	lastSpec runtime.Spec     // the last Start's
	lastExec runtime.ExecSpec // the last Exec's
	// probe, when set, answers Probe for a running sandbox (the default answers at once).
	probe  func(ctx context.Context, id string) runtime.Liveness
	probes atomic.Int32 // Probe calls
	// glance, when set, answers Glance for a running sandbox (the default: answering).
	glance  func(id string) runtime.Liveness
	spares  map[string]bool // the running spares not yet adopted
	adopted []fakeAdoption
}

func (r *fakeRuntime) setRunning(id string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[id] = on
}

func (r *fakeRuntime) Start(ctx context.Context, s runtime.Spec) error {
	if err := r.log.call("runtime.Start"); err != nil {
		return err
	}
	// What the real runtime does with the caller's parts: the workspace before the container
	// starts, the network once it runs; either failing fails the start.
	if s.Workspace != nil {
		dir, err := s.Workspace()
		if err != nil {
			return err
		}
		s.WorkspaceDir = dir
	}
	if s.Network != nil {
		if err := s.Network(ctx); err != nil {
			return err
		}
	}
	r.mu.Lock()
	if s.Spare {
		if r.spares == nil {
			r.spares = map[string]bool{}
		}
		r.spares[s.ID] = true
	} else {
		r.lastSpec = s
	}
	r.mu.Unlock()
	r.setRunning(s.ID, true)
	return nil
}

// Adopt gives a running spare its parts as the real runtime does: the workspace and the
// network, either failing fails the adoption.
func (r *fakeRuntime) Adopt(ctx context.Context, id string, a runtime.AdoptSpec) error {
	if err := r.log.call("runtime.Adopt"); err != nil {
		return err
	}
	if !r.Running(id) {
		return runtime.ErrNotRunning
	}
	r.mu.Lock()
	spare := r.spares[id]
	r.mu.Unlock()
	if !spare {
		return fmt.Errorf("adopt %s: not a spare", id)
	}
	dir, err := a.Workspace()
	if err != nil {
		return err
	}
	if a.Network != nil {
		if err := a.Network(ctx); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.adopted = append(r.adopted, fakeAdoption{id: id, hostname: a.Hostname, workspace: dir})
	delete(r.spares, id)
	r.mu.Unlock()
	return nil
}

// fakeAdoption is what Adopt gave a spare.
type fakeAdoption struct{ id, hostname, workspace string }

func (r *fakeRuntime) Stop(_ context.Context, id string, _ time.Duration) error {
	if err := r.log.call("runtime.Stop"); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.spares, id)
	r.mu.Unlock()
	r.setRunning(id, false)
	return nil
}

func (r *fakeRuntime) Running(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[id]
}

func (r *fakeRuntime) Glance(id string) runtime.Liveness {
	if !r.Running(id) {
		return runtime.Gone
	}
	if r.glance != nil {
		return r.glance(id)
	}
	return runtime.Answering
}

func (r *fakeRuntime) Probe(ctx context.Context, id string) runtime.Liveness {
	r.probes.Add(1)
	if !r.Running(id) {
		return runtime.Gone
	}
	if r.probe != nil {
		return r.probe(ctx, id)
	}
	return runtime.Answering
}

func (r *fakeRuntime) List() ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, on := range r.running {
		if on {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (r *fakeRuntime) RemoveLayer(string) error { return r.log.call("runtime.RemoveLayer") }

// DialLoopback returns no connection: the manager only passes it on.
func (r *fakeRuntime) DialLoopback(_ context.Context, id, _ string) (net.Conn, error) {
	if err := r.log.call("runtime.DialLoopback"); err != nil {
		return nil, err
	}
	if !r.Running(id) {
		return nil, runtime.ErrNotRunning
	}
	return nil, nil
}

// Exec returns no process: the manager only passes it on.
func (r *fakeRuntime) OOMKills(string) (uint64, error) { return 0, nil }

func (r *fakeRuntime) Exec(_ context.Context, id string, spec runtime.ExecSpec) (runtime.Process, error) {
	if err := r.log.call("runtime.Exec"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.lastExec = spec
	r.mu.Unlock()
	if !r.Running(id) {
		return nil, runtime.ErrNotRunning
	}
	return nil, nil
}

// fakeVolumes keeps volumes and snapshots as capacities in memory. It refuses what the real
// drivers refuse where the manager's order matters: mounting or growing a missing volume,
// restoring a mounted one.
type fakeVolumes struct {
	log     *callLog
	mu      sync.Mutex
	vols    map[string]int64 // id → capacity in bytes
	mounted map[string]bool
	snaps   map[string]int64 // snapshot id → capacity in bytes
}

var (
	_ volume.Driver      = (*fakeVolumes)(nil)
	_ volume.Grower      = (*fakeVolumes)(nil)
	_ volume.Snapshotter = (*fakeVolumes)(nil)
)

func (v *fakeVolumes) setMounted(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.mounted[id] = true
}

func (v *fakeVolumes) Name() string    { return "fake" }
func (v *fakeVolumes) Resizable() bool { return true }

func (v *fakeVolumes) Create(_ context.Context, id string, sizeGiB, _, _ int) (volume.Info, error) {
	if err := v.log.call("volume.Create"); err != nil {
		return volume.Info{}, err
	}
	if sizeGiB == 0 {
		sizeGiB = volume.DefaultSizeGiB
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	// As the real drivers: the same volume again is no change, another size is refused.
	if have, ok := v.vols[id]; ok && have != int64(sizeGiB)*gib {
		return volume.Info{}, fmt.Errorf("volume %s has %d GiB, not %d: %w", id, have/gib, sizeGiB, volume.ErrExists)
	}
	v.vols[id] = int64(sizeGiB) * gib
	return volume.Info{ID: id, CapacityBytes: v.vols[id], Resizable: true}, nil
}

func (v *fakeVolumes) Mount(_ context.Context, id string) (string, error) {
	if err := v.log.call("volume.Mount"); err != nil {
		return "", err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.vols[id]; !ok {
		return "", fmt.Errorf("mount %s: %w", id, volume.ErrNotFound)
	}
	v.mounted[id] = true
	return "/nonexistent/workspace/" + id, nil
}

func (v *fakeVolumes) Unmount(_ context.Context, id string) error {
	if err := v.log.call("volume.Unmount"); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.mounted, id)
	return nil
}

func (v *fakeVolumes) Delete(_ context.Context, id string) error {
	if err := v.log.call("volume.Delete"); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.mounted, id)
	delete(v.vols, id)
	return nil
}

func (v *fakeVolumes) Info(_ context.Context, id string) (volume.Info, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.vols[id]
	if !ok {
		return volume.Info{}, volume.ErrNotFound
	}
	return volume.Info{ID: id, CapacityBytes: c, Resizable: true}, nil
}

func (v *fakeVolumes) List(context.Context) ([]string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Sorted(maps.Keys(v.vols)), nil
}

func (v *fakeVolumes) Grow(_ context.Context, id string, sizeGiB int) (volume.Info, error) {
	if err := v.log.call("volume.Grow"); err != nil {
		return volume.Info{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.vols[id]
	switch {
	case !ok:
		return volume.Info{}, volume.ErrNotFound
	case int64(sizeGiB)*gib < c:
		return volume.Info{}, fmt.Errorf("grow %s to %d GiB: smaller than it is", id, sizeGiB)
	}
	v.vols[id] = int64(sizeGiB) * gib
	return volume.Info{ID: id, CapacityBytes: v.vols[id], Resizable: true}, nil
}

func (v *fakeVolumes) Snapshot(_ context.Context, id, snapID string, _ volume.Progress) (volume.SnapshotInfo, error) {
	if err := v.log.call("volume.Snapshot"); err != nil {
		return volume.SnapshotInfo{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.vols[id]
	if !ok {
		return volume.SnapshotInfo{}, volume.ErrNotFound
	}
	v.snaps[snapID] = c
	return volume.SnapshotInfo{ID: snapID, CapacityBytes: c}, nil
}

func (v *fakeVolumes) DeleteSnapshot(_ context.Context, snapID string) error {
	if err := v.log.call("volume.DeleteSnapshot"); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.snaps, snapID)
	return nil
}

func (v *fakeVolumes) SnapshotInfo(_ context.Context, snapID string) (volume.SnapshotInfo, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.snaps[snapID]
	if !ok {
		return volume.SnapshotInfo{}, volume.ErrNotFound
	}
	return volume.SnapshotInfo{ID: snapID, CapacityBytes: c}, nil
}

func (v *fakeVolumes) ListSnapshots(context.Context) ([]string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Sorted(maps.Keys(v.snaps)), nil
}

func (v *fakeVolumes) CreateFromSnapshot(_ context.Context, id, snapID string, _ volume.Progress) (volume.Info, error) {
	if err := v.log.call("volume.CreateFromSnapshot"); err != nil {
		return volume.Info{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.snaps[snapID]
	if !ok {
		return volume.Info{}, volume.ErrNotFound
	}
	v.vols[id] = c
	return volume.Info{ID: id, CapacityBytes: c, Resizable: true}, nil
}

func (v *fakeVolumes) Restore(_ context.Context, id, snapID string, _ volume.Progress) (volume.Info, error) {
	if err := v.log.call("volume.Restore"); err != nil {
		return volume.Info{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.vols[id]
	sc, snapOK := v.snaps[snapID]
	switch {
	case !ok || !snapOK:
		return volume.Info{}, volume.ErrNotFound
	case v.mounted[id]:
		return volume.Info{}, volume.ErrBusy
	}
	v.vols[id] = max(c, sc)
	return volume.Info{ID: id, CapacityBytes: v.vols[id], Resizable: true}, nil
}

// fakeImages knows one built image, "minimal".
type fakeImages struct{}

func (fakeImages) Get(name string) (images.Image, error) {
	if name != "minimal" {
		return images.Image{}, fmt.Errorf("image %q: %w", name, images.ErrUnknown)
	}
	return images.Image{Name: name, Path: "/nonexistent/images/minimal/rootfs"}, nil
}

// fakeManager is a manager on a real store in a temp dir, with the fake runtime and volumes.
type fakeManager struct {
	*Manager
	calls *callLog
	rt    *fakeRuntime
	vol   *fakeVolumes

	mu      sync.Mutex
	stopped []string // the names the manager reported stopped
}

func newFakeManager(t *testing.T) *fakeManager {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	calls := &callLog{calls: map[string]int{}, fail: map[string]error{}}
	f := &fakeManager{
		calls: calls,
		rt:    &fakeRuntime{log: calls, running: map[string]bool{}},
		vol:   &fakeVolumes{log: calls, vols: map[string]int64{}, mounted: map[string]bool{}, snaps: map[string]int64{}},
	}
	f.Manager = NewManager(st, f.rt, f.vol, fakeImages{}, filepath.Join(dir, "sandboxes"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.OnStop(func(name string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.stopped = append(f.stopped, name)
	})
	return f
}

// takeStopped returns the names reported stopped since the last take.
func (f *fakeManager) takeStopped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stopped
	f.stopped = nil
	return s
}
