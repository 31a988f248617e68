package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/volume"
	"github.com/hiloop/hiloop/pkg/api"
)

// Spare sandboxes are started ahead of need (runtime.Spec.Spare): a create that a spare can
// serve takes one and gives it the new sandbox's id (the spare's own), name, workspace and
// egress (runtime.Adopt) instead of starting a container, which costs a few milliseconds where
// a start costs tens. A spare serves a create of its image (the generation it was started
// from) with the default limits and root filesystem, started at once; any other create starts
// its sandbox as before. Spares are of the default image until a create that only its image
// kept from a spare names another: they follow the image sandboxes are made of (a daemon that
// starts takes the image of the newest sandbox record). Each take starts a replacement in the
// background.
//
// A spare has no record: it is not listed, and its resources (container, cgroup, root layer,
// host id range) are the runtime's and the manager's alone until a create's record names its
// id. A daemon that stops removes its spares; one that crashed leaves them to the next
// daemon's Reconcile, which removes containers no record knows. Their root layers are thin and
// their memory that of an idle sandbox (~3 MiB): the storage and host budgets count a spare
// once a create takes it.

// spareStartTimeout bounds the start of one spare.
const spareStartTimeout = time.Minute

// spareRefillDelay is how long the replacement of a spare a create took waits to start.
const spareRefillDelay = 250 * time.Millisecond

// spare is a started spare sandbox.
type spare struct {
	id   string
	base uint32 // its range of host ids, held (reserveIDBase) until a record holds it
	// volume: a workspace of the default size, made and mounted beside its start, which a
	// create that wants one takes with it (others delete it first).
	volume bool
	// image and imagePath are the image it was started from: its name and its rootfs, which is
	// new with every build of the image.
	image, imagePath string
}

// spares is the manager's pool.
type spares struct {
	mu    sync.Mutex
	want  int    // how many to keep ready; 0: none
	image string // the image new spares are made of
	// cpus and memoryMB are a spare's limits: a create's defaults on this host.
	cpus     float64
	memoryMB int
	ready    []spare
	// taken are the spares creates took, by id, until their start adopts them.
	taken map[string]spare
	// making: a goroutine is starting spares. stalled: the last start failed, and none is
	// made until a create asks again. closed: the pool is closed for good.
	making, stalled, closed bool
	// asks counts the creates a spare could serve: a failed start stalls the pool only if
	// none asked while it ran.
	asks int
	// wg is the goroutines that make and remove spares; each is added under mu while the pool
	// is open, so CloseSpares's wait sees them all.
	wg sync.WaitGroup
}

// SetSpares keeps n spare sandboxes started (0: none), with the limits a create gets by
// default on this host (cpus, memoryMB), of the image of the newest sandbox (the default image
// when there is none) until creates use another: a restarted daemon's spares follow the
// image its creates used. Call it after Reconcile, which would remove them.
func (m *Manager) SetSpares(n int, cpus float64, memoryMB int) {
	image := ""
	if recs, err := m.store.ListSandboxes(); err == nil && len(recs) > 0 {
		newest := slices.MaxFunc(recs, func(a, b store.Sandbox) int { return a.CreatedAt.Compare(b.CreatedAt) })
		image = newest.Image
	}
	s := &m.spares
	s.mu.Lock()
	s.want = max(n, 0)
	s.cpus, s.memoryMB = cpus, memoryMB
	if s.image == "" {
		s.image = cmp.Or(image, api.DefaultImage)
	}
	var extra []spare
	if len(s.ready) > s.want {
		extra, s.ready = s.ready[s.want:], s.ready[:s.want]
	}
	s.mu.Unlock()
	m.dropSpares(extra)
	m.fillSpares()
}

// Spares says how many spares the pool keeps, how many are ready, and of which image.
func (m *Manager) Spares() api.Spares {
	s := &m.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	info := api.Spares{Wanted: s.want, Ready: len(s.ready)}
	if s.want > 0 {
		info.Image = s.image
	}
	for _, sp := range s.ready {
		info.IDs = append(info.IDs, sp.id)
	}
	return info
}

// CloseSpares removes every spare that no create took, and makes no more. It returns once
// every spare being made or removed is done with.
func (m *Manager) CloseSpares(ctx context.Context) {
	s := &m.spares
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	left := s.ready
	s.ready = nil
	s.mu.Unlock()
	for _, sp := range left {
		m.dropSpare(ctx, sp)
	}
}

// ImageChanged replaces the ready spares of image that an earlier build of it made (a build
// that found the image up to date changes nothing): no create would take them. It does not wait
// for them to go.
func (m *Manager) ImageChanged(image string) {
	img, err := m.images.Get(image)
	if err != nil {
		return
	}
	m.dropSpares(m.unreadySpares(image, img.Path))
	// A pool stalled on this image (not built when it tried) can make spares now.
	m.spares.mu.Lock()
	if m.spares.image == image {
		m.spares.stalled = false
	}
	m.spares.mu.Unlock()
	m.fillSpares()
}

// DropSpares removes the ready spares of image before it goes, and waits for them. The pool
// makes more of it only once a create names it again.
func (m *Manager) DropSpares(ctx context.Context, image string) {
	for _, sp := range m.unreadySpares(image, "") {
		m.dropSpare(ctx, sp)
	}
}

// unreadySpares takes the ready spares of image not made of its build at keepPath out of the
// pool and returns them.
func (m *Manager) unreadySpares(image, keepPath string) []spare {
	s := &m.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []spare
	s.ready = slices.DeleteFunc(s.ready, func(sp spare) bool {
		if sp.image == image && sp.imagePath != keepPath {
			gone = append(gone, sp)
			return true
		}
		return false
	})
	return gone
}

// fits says whether a spare can be the sandbox of create p, whose record is rec: one that
// starts at once with the limits and root filesystem spares have. The caller holds mu.
func (s *spares) fits(rec store.Sandbox, p api.SandboxesPost) bool {
	return !p.NoStart && rec.CPUs == s.cpus && rec.MemoryMB == s.memoryMB && rec.RootfsGiB == api.DefaultRootfsGiB
}

// takeSpare gives create p (record rec, image img) a spare when one fits, and keeps it among
// the taken until the create's start adopts it (adoptable) or the create gives it up
// (untakeSpare). Spares of another image or an earlier build of img are removed.
func (m *Manager) takeSpare(rec store.Sandbox, p api.SandboxesPost, img images.Image) (spare, bool) {
	s := &m.spares
	s.mu.Lock()
	if s.want == 0 || s.closed || !s.fits(rec, p) {
		s.mu.Unlock()
		return spare{}, false
	}
	s.image, s.stalled = rec.Image, false
	s.asks++
	var stale []spare
	var sp spare
	found := false
	for len(s.ready) > 0 && !found {
		sp, s.ready = s.ready[0], s.ready[1:]
		if sp.image == rec.Image && sp.imagePath == img.Path {
			found = true
		} else {
			stale = append(stale, sp)
		}
	}
	if found {
		if s.taken == nil {
			s.taken = map[string]spare{}
		}
		s.taken[sp.id] = sp
	}
	s.mu.Unlock()
	m.dropSpares(stale)
	if found {
		// The replacement's start (tens of milliseconds of CPU) waits a little: it would
		// compete with the create's own first exec, which usually follows at once.
		time.AfterFunc(spareRefillDelay, m.fillSpares)
	} else {
		m.fillSpares()
	}
	return sp, found
}

// returnSpare puts back a spare whose create failed before anything was given to it (its name
// was taken, the storage budget refused it): it is as good as it was, unless the pool closed or
// moved to another image meanwhile.
func (m *Manager) returnSpare(sp spare) {
	s := &m.spares
	s.mu.Lock()
	delete(s.taken, sp.id)
	keep := !s.closed && sp.image == s.image && len(s.ready) < s.want
	if keep {
		s.ready = append([]spare{sp}, s.ready...)
	}
	s.mu.Unlock()
	if !keep {
		m.dropSpares([]spare{sp})
	}
}

// untakeSpare forgets the taken spare id: its create failed. The caller removes it (it has the
// create's id, so the create's own clean-up does).
func (m *Manager) untakeSpare(id string) {
	m.spares.mu.Lock()
	delete(m.spares.taken, id)
	m.spares.mu.Unlock()
}

// keepsVolume settles whether the spare create p (record rec) took keeps its workspace: a
// create of the default workspace size (asked for or not) that is no fork does; any other
// deletes it, and makes its own as it would without a spare.
func (m *Manager) keepsVolume(ctx context.Context, rec store.Sandbox, p api.SandboxesPost) error {
	s := &m.spares
	s.mu.Lock()
	sp, ok := s.taken[rec.ID]
	s.mu.Unlock()
	if !ok || !sp.volume || (p.FromSnapshot == "" && recordedGiB(rec) == volume.DefaultSizeGiB) {
		return nil
	}
	if err := m.volumes.Delete(ctx, rec.ID); err != nil {
		return fmt.Errorf("delete a spare's workspace: %w", err)
	}
	s.mu.Lock()
	if sp, ok := s.taken[rec.ID]; ok {
		sp.volume = false
		s.taken[rec.ID] = sp
	}
	s.mu.Unlock()
	return nil
}

// spareVolume says whether the create of sandbox id took a spare with its workspace.
func (m *Manager) spareVolume(id string) bool {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	return m.spares.taken[id].volume
}

// adoptable returns the spare a create took for the sandbox id, if any, and forgets it.
func (m *Manager) adoptable(id string) (spare, bool) {
	s := &m.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.taken[id]
	delete(s.taken, id)
	return sp, ok
}

// fillSpares starts spares in the background until the pool has what it wants, unless it is
// doing so already.
func (m *Manager) fillSpares() {
	s := &m.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.making || s.closed || s.stalled || len(s.ready) >= s.want {
		return
	}
	s.making = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			s.mu.Lock()
			if s.closed || s.stalled || len(s.ready) >= s.want {
				s.making = false
				s.mu.Unlock()
				return
			}
			image, cpus, memoryMB, asks := s.image, s.cpus, s.memoryMB, s.asks
			s.mu.Unlock()

			sp, err := m.startSpare(image, cpus, memoryMB)
			s.mu.Lock()
			if err != nil && s.asks != asks {
				// A create asked meanwhile (for this image or another): try again for it.
				s.mu.Unlock()
				continue
			}
			if err != nil {
				s.stalled = true
				s.making = false
				s.mu.Unlock()
				if isImageMissing(err) {
					m.log.Info("no spare sandbox: its image is not built", "image", image)
				} else {
					m.log.Warn("could not start a spare sandbox; creates start their own until one asks again", "image", image, "err", err)
				}
				return
			}
			keep := !s.closed && sp.image == s.image && len(s.ready) < s.want
			if keep {
				s.ready = append(s.ready, sp)
			}
			s.mu.Unlock()
			if !keep {
				m.dropSpare(context.Background(), sp)
			}
		}
	}()
}

// startSpare starts a spare of image with the limits given, and its workspace beside.
func (m *Manager) startSpare(image string, cpus float64, memoryMB int) (spare, error) {
	ctx, cancel := context.WithTimeout(context.Background(), spareStartTimeout)
	defer cancel()
	img, err := m.image(image)
	if err != nil {
		return spare{}, err
	}
	sp := spare{id: newID(), image: image, imagePath: img.Path, volume: true}
	if sp.base, err = m.reserveIDBase(); err != nil {
		return spare{}, err
	}
	// Its workspace is made beside its start, as a create's is.
	volume := make(chan error, 1)
	go func() {
		_, err := m.volumes.Create(ctx, sp.id, 0, AgentUID, AgentGID)
		if err == nil {
			_, err = m.volumes.Mount(ctx, sp.id)
		}
		volume <- err
	}()
	err = m.startSpareContainer(ctx, sp, img, cpus, memoryMB)
	if verr := <-volume; err == nil && verr != nil {
		err = fmt.Errorf("a spare's workspace: %w", verr)
	}
	if err != nil {
		m.dropSpare(ctx, sp)
		return spare{}, err
	}
	return sp, nil
}

// startSpareContainer makes the spare's root layer and starts its container.
func (m *Manager) startSpareContainer(ctx context.Context, sp spare, img images.Image, cpus float64, memoryMB int) error {
	layerDir := filepath.Join(m.layerDir, sp.id)
	if m.layers != nil {
		var err error
		if layerDir, err = m.layers.Fresh(ctx, sp.id, api.DefaultRootfsGiB); err != nil {
			return storageError("make a spare's root filesystem", err)
		}
	}
	spec := runtime.Spec{
		ID:       sp.id,
		ImageDir: img.Path,
		LayerDir: layerDir,
		IDBase:   sp.base,
		CPUs:     cpus,
		MemoryMB: memoryMB,
		Spare:    true,
	}
	if m.egress != nil {
		spec.Nameserver = m.egress.Nameserver()
		spec.ExtraCAs = m.egress.CACerts()
		// The capture is made now; the adoption serves it under the sandbox's policy.
		spec.Network = func(ctx context.Context) error {
			if err := m.egress.Prepare(ctx, sp.id); err != nil {
				return fmt.Errorf("egress: %w", err)
			}
			return nil
		}
	}
	if err := m.runtime.Start(ctx, spec); err != nil {
		return fmt.Errorf("start a spare sandbox: %w", err)
	}
	return nil
}

// dropSpares removes spares in the background, or at once once the pool is closed.
func (m *Manager) dropSpares(list []spare) {
	if len(list) == 0 {
		return
	}
	s := &m.spares
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, sp := range list {
			m.dropSpare(context.Background(), sp)
		}
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		for _, sp := range list {
			m.dropSpare(context.Background(), sp)
		}
	}()
}

// dropSpare removes a spare no create took: its egress capture, container, root layer,
// workspace and range.
func (m *Manager) dropSpare(ctx context.Context, sp spare) {
	m.detach(sp.id)
	err := m.runtime.Stop(ctx, sp.id, 0)
	if err == nil && m.layers != nil {
		err = m.layers.Drop(ctx, sp.id)
	}
	if err == nil {
		err = m.runtime.RemoveLayer(filepath.Join(m.layerDir, sp.id))
	}
	if err == nil && sp.volume {
		err = m.volumes.Delete(ctx, sp.id)
	}
	if err != nil {
		// Its range stays held: something may still run in it. The next Reconcile removes it.
		m.log.Error("remove a spare sandbox", "id", sp.id, "err", err)
		return
	}
	m.releaseIDBase(sp.base)
}

// adoptSpare makes the spare a create took (for rec, of image img) rec's running sandbox: its
// name, workspace and egress. A spare of an earlier build of the image (rebuilt between the
// take and the start) is removed instead, and false says the caller starts the sandbox itself.
func (m *Manager) adoptSpare(ctx context.Context, rec *store.Sandbox, sp spare, img images.Image) (bool, error) {
	if sp.imagePath != img.Path {
		if err := m.runtime.Stop(ctx, rec.ID, 0); err != nil {
			return true, err
		}
		return false, m.dropLayer(ctx, *rec)
	}
	workspaceMade := false
	spec := runtime.AdoptSpec{
		Hostname: displayName(rec.Name),
		Workspace: func() (string, error) {
			workspaceMade = true
			if sp.volume {
				return m.volumes.Mount(ctx, rec.ID) // mounted already: the spare's
			}
			return m.workspace(ctx, rec)
		},
	}
	if m.egress != nil {
		spec.Network = m.attachEgress(rec)
	}
	err := m.runtime.Adopt(ctx, rec.ID, spec)
	if errors.Is(err, runtime.ErrNotRunning) && !workspaceMade {
		// The spare died before it was given anything (killed from outside): the create
		// starts its sandbox itself.
		if err := m.runtime.Stop(ctx, rec.ID, 0); err != nil {
			return true, err
		}
		return false, m.dropLayer(ctx, *rec)
	}
	return true, err
}

// isImageMissing tells the error of an image that is not built (or not known).
func isImageMissing(err error) bool {
	var apiErr *api.Error
	return errors.As(err, &apiErr) && apiErr.Code == api.CodeImageNotFound
}
