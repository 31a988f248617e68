package sandbox

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/pkg/api"
)

// readySpares waits until the pool holds n ready spares and returns their ids.
func readySpares(t *testing.T, m *Manager, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.spares.mu.Lock()
		var ids []string
		for _, sp := range m.spares.ready {
			ids = append(ids, sp.id)
		}
		making := m.spares.making
		m.spares.mu.Unlock()
		if len(ids) == n && !making {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d ready spares (making %v), want %d", len(ids), making, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A create that fits a spare takes it: the sandbox gets the spare's id and range, is adopted
// (its name, workspace, egress) instead of started, and a replacement starts. A create a spare
// cannot serve starts its own sandbox and leaves the spare.
func TestSpareServesCreate(t *testing.T) {
	f := newFakeManager(t)
	ctx := context.Background()
	f.SetSpares(1, api.DefaultCPUs, api.DefaultMemoryMB)
	// The default image is not built here: no spare, and no retry until a create asks.
	readySpares(t, f.Manager, 0)
	if !f.spares.stalled {
		t.Fatal("a spare of an image that is not built did not stall the pool")
	}
	// The first create of minimal starts its own sandbox and turns the pool to minimal.
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "first", Image: "minimal"})
	spare := readySpares(t, f.Manager, 1)[0]
	f.calls.take()

	sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "fast", Image: "minimal", StorageClass: api.StorageEphemeral})
	if sb.ID != spare || sb.State != api.StateRunning {
		t.Fatalf("create from a spare: id %s state %s, want the spare's id %s, running", sb.ID, sb.State, spare)
	}
	f.rt.mu.Lock()
	adopted := slices.Clone(f.rt.adopted)
	f.rt.mu.Unlock()
	if len(adopted) != 1 || adopted[0].id != spare || adopted[0].hostname != "fast" || adopted[0].workspace == "" {
		t.Errorf("adoptions %+v, want the spare given hostname fast and a workspace", adopted)
	}
	rec, err := f.store.GetSandbox("fast")
	if err != nil || rec.ID != spare || rec.IDBase == 0 {
		t.Fatalf("record %+v, %v", rec, err)
	}
	replacement := readySpares(t, f.Manager, 1)[0]
	if replacement == spare {
		t.Fatal("no replacement spare was started")
	}
	// The record holds the spare's range now: no other sandbox gets it.
	f.idMu.Lock()
	held := f.heldBases[rec.IDBase]
	f.idMu.Unlock()
	if held {
		t.Error("the adopted spare's range is still held apart from its record")
	}
	if calls := f.calls.take(); calls["runtime.Adopt"] != 1 || calls["runtime.Start"] != 1 || calls["volume.Create"] != 1 {
		t.Errorf("calls %v, want one adoption, one start (the replacement), one workspace", calls)
	}

	// A create refused before anything is given to the spare (its name is taken) puts it back.
	p := api.SandboxesPost{Name: "fast", Image: "minimal"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Create(ctx, p); !isCode(err, api.CodeSandboxExists) {
		t.Fatalf("create of a taken name: %v, want sandbox_exists", err)
	}
	if got := readySpares(t, f.Manager, 1)[0]; got != replacement || !f.rt.Running(replacement) {
		t.Errorf("after a refused create the pool holds %s (running %v), want %s back", got, f.rt.Running(got), replacement)
	}

	// Limits other than a spare's: a start of its own; the spare stays.
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "big", Image: "minimal", CPUs: 4})
	if got := readySpares(t, f.Manager, 1)[0]; got != replacement {
		t.Errorf("a create with its own limits took spare %s", got)
	}
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "later", Image: "minimal", NoStart: true})
	readySpares(t, f.Manager, 1)

	// A spare comes with a workspace of the default size; a create that wants another size
	// gets its own in its place.
	sized := mustCreate(t, f.Manager, api.SandboxesPost{Name: "sized", Image: "minimal", WorkspaceGiB: 20})
	if sized.ID != replacement || sized.Workspace.CapacityBytes != 20*gib {
		t.Errorf("sized create: id %s (spare %s), workspace %d bytes, want the spare with 20 GiB", sized.ID, replacement, sized.Workspace.CapacityBytes)
	}
	replacement = readySpares(t, f.Manager, 1)[0]
	// The default size asked for by name keeps the spare's own.
	f.calls.take()
	asked := mustCreate(t, f.Manager, api.SandboxesPost{Name: "asked", Image: "minimal", WorkspaceGiB: api.DefaultWorkspaceGiB})
	if got := f.calls.take(); asked.ID != replacement || got["volume.Delete"] != 0 {
		t.Errorf("create asking for the default size: id %s (spare %s), calls %v, want the spare with its workspace kept", asked.ID, replacement, got)
	}
	replacement = readySpares(t, f.Manager, 1)[0]

	// A sandbox made from a spare stops and starts as any other.
	if _, err := f.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Start(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	if f.rt.lastSpec.ID != spare || f.rt.lastSpec.Hostname != "fast" || f.rt.lastSpec.Spare {
		t.Errorf("restart of the adopted sandbox: spec %+v", f.rt.lastSpec)
	}

	// Closing the pool removes the spare and makes no more.
	f.CloseSpares(ctx)
	if f.rt.Running(replacement) {
		t.Error("the spare still runs after CloseSpares")
	}
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "closed", Image: "minimal"})
	readySpares(t, f.Manager, 0)
}

// A failed adoption fails the create and leaves nothing of the sandbox or the spare.
func TestSpareAdoptionFails(t *testing.T) {
	f := newFakeManager(t)
	f.SetSpares(1, api.DefaultCPUs, api.DefaultMemoryMB)
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "first", Image: "minimal"})
	spare := readySpares(t, f.Manager, 1)[0]
	f.calls.failNext("runtime.Adopt", errors.New("adopt failed"))
	p := api.SandboxesPost{Name: "doomed", Image: "minimal"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Create(context.Background(), p); err == nil {
		t.Fatal("create succeeded although the adoption failed")
	}
	if _, err := f.store.GetSandbox("doomed"); err == nil {
		t.Error("the failed create left its record")
	}
	if f.rt.Running(spare) {
		t.Error("the spare of the failed create still runs")
	}
	f.vol.mu.Lock()
	_, ws := f.vol.vols[spare]
	f.vol.mu.Unlock()
	if ws {
		t.Error("the failed create left its workspace")
	}
}

// switchImages is an image store whose every image is built (unless unbuilt) as build says,
// which a rebuild replaces (a new rootfs path, other defaults).
type switchImages struct {
	mu      sync.Mutex
	build   images.Image
	unbuilt bool
}

// rebuild makes b the images' current build, as a build that changed it does.
func (s *switchImages) rebuild(b images.Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.build = b
}

// withSpare is a fake manager keeping one spare of minimal, built at rootfs-1, and the spare.
func withSpare(t *testing.T) (*fakeManager, *switchImages, string) {
	t.Helper()
	f := newFakeManager(t)
	imgs := &switchImages{build: images.Image{Path: "/images/minimal/rootfs-1"}}
	f.images = imgs
	f.SetSpares(1, api.DefaultCPUs, api.DefaultMemoryMB)
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "first", Image: "minimal"})
	return f, imgs, readySpares(t, f.Manager, 1)[0]
}

func (s *switchImages) Get(name string) (images.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unbuilt {
		return images.Image{}, fmt.Errorf("image %q: %w", name, images.ErrNotBuilt)
	}
	img := s.build
	img.Name = name
	return img, nil
}

// A spare of an earlier build of its image serves no create: the create starts its own
// sandbox from the new build, and the stale spare is replaced.
func TestStaleSpareIsReplaced(t *testing.T) {
	f, imgs, stale := withSpare(t)
	// A build that changes nothing keeps the spare.
	f.ImageChanged("minimal")
	if got := readySpares(t, f.Manager, 1)[0]; got != stale {
		t.Fatalf("an unchanged image replaced its spare %s with %s", stale, got)
	}
	imgs.rebuild(images.Image{Path: "/images/minimal/rootfs-2"})
	sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "second", Image: "minimal"})
	if sb.ID == stale {
		t.Fatal("a spare of the earlier build served the create")
	}
	if f.rt.lastSpec.ImageDir != "/images/minimal/rootfs-2" {
		t.Errorf("the create started from %q, want the new build", f.rt.lastSpec.ImageDir)
	}
	fresh := readySpares(t, f.Manager, 1)[0]
	deadline := time.Now().Add(10 * time.Second)
	for f.rt.Running(stale) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if f.rt.Running(stale) {
		t.Error("the stale spare still runs")
	}
	if sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "third", Image: "minimal"}); sb.ID != fresh {
		t.Errorf("create after the rebuild: id %s, want the new spare %s", sb.ID, fresh)
	}
}

// A new build of the spares' image replaces them at once; an image about to be deleted loses
// its spares first, and none is made of it until a create names it again.
func TestImageChangeReplacesSpares(t *testing.T) {
	f, imgs, old := withSpare(t)
	imgs.rebuild(images.Image{Path: "/images/minimal/rootfs-2"})
	f.ImageChanged("minimal")
	fresh := readySpares(t, f.Manager, 1)[0]
	if fresh == old {
		t.Fatal("the spare of the earlier build was kept")
	}
	f.DropSpares(context.Background(), "minimal")
	if got := readySpares(t, f.Manager, 0); len(got) != 0 || f.rt.Running(fresh) {
		t.Errorf("spares left after DropSpares: %v (running %v)", got, f.rt.Running(fresh))
	}
}

// A create the storage budget refuses gives its spare back (or, if a replacement is ready
// first, removes it): one spare is left running, and nothing of the refused create.
func TestRefusedCreateGivesSpareBack(t *testing.T) {
	f := newFakeManager(t)
	ctx := context.Background()
	f.SetSpares(1, api.DefaultCPUs, api.DefaultMemoryMB)
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "first", Image: "minimal"})
	spare := readySpares(t, f.Manager, 1)[0]
	f.SetBudget(1, fakePool{free: 20 * gib})
	p := api.SandboxesPost{Name: "huge", Image: "minimal"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Create(ctx, p); !isCode(err, api.CodeInsufficientStorage) {
		t.Fatalf("create over the budget: %v, want insufficient_storage", err)
	}
	ready := readySpares(t, f.Manager, 1)[0]
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids, _ := f.rt.List()
		var spares []string
		for _, id := range ids {
			if rec, err := f.store.GetSandbox("first"); err == nil && rec.ID != id {
				spares = append(spares, id)
			}
		}
		if len(spares) == 1 && spares[0] == ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("running spares %v, want only the ready one %s (the taken one was %s)", spares, ready, spare)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := f.store.GetSandbox("huge"); err == nil {
		t.Error("the refused create left a record")
	}
}

// A spare's egress capture is made with it; the create that takes it attaches it under the
// create's own policy, and a spare removed unused drops its capture.
func TestSpareEgress(t *testing.T) {
	f := newFakeManager(t)
	eg := newFakeEgress(f.calls)
	f.SetEgress(eg)
	f.SetSpares(1, api.DefaultCPUs, api.DefaultMemoryMB)
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "first", Image: "minimal"})
	spare := readySpares(t, f.Manager, 1)[0]
	eg.mu.Lock()
	prepared := eg.prepared[spare]
	eg.mu.Unlock()
	if !prepared {
		t.Fatal("the spare's egress was not prepared with it")
	}
	closed := api.Egress{Mode: api.EgressClosed, Allow: []string{"api.example.com"}}
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "closed", Image: "minimal", Egress: &closed})
	if p, ok := eg.policy(spare); !ok || p.Mode != api.EgressClosed || !reflect.DeepEqual(p.Allow, closed.Allow) {
		t.Errorf("the adopted spare is served under %+v (attached %v), want the create's closed policy", p, ok)
	}
	replacement := readySpares(t, f.Manager, 1)[0]
	f.CloseSpares(context.Background())
	eg.mu.Lock()
	left := eg.prepared[replacement]
	eg.mu.Unlock()
	if left {
		t.Error("a spare removed unused kept its egress capture")
	}
}

// A pool that found the default image not built makes its spare as soon as the image is built,
// before any create asks: the first create finds one ready.
func TestSpareAfterTheImageIsBuilt(t *testing.T) {
	f := newFakeManager(t)
	imgs := &switchImages{build: images.Image{Path: "/images/base/rootfs-1"}, unbuilt: true}
	f.images = imgs
	f.SetSpares(1, api.DefaultCPUs, api.DefaultMemoryMB)
	readySpares(t, f.Manager, 0)
	imgs.mu.Lock()
	imgs.unbuilt = false
	imgs.mu.Unlock()
	f.ImageChanged(api.DefaultImage)
	spare := readySpares(t, f.Manager, 1)[0]
	if sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "hello"}); sb.ID != spare {
		t.Errorf("the first create after the build: id %s, want the spare %s", sb.ID, spare)
	}
}

// A daemon that starts makes spares of the newest sandbox's image, not the default one: its
// creates used that image before the restart.
func TestSparesFollowTheNewestRecord(t *testing.T) {
	f := newFakeManager(t)
	ctx := context.Background()
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "web", Image: "minimal"})
	if err := f.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	f.SetSpares(1, api.DefaultCPUs, api.DefaultMemoryMB)
	readySpares(t, f.Manager, 1)
	if got := f.Spares().Image; got != "minimal" {
		t.Errorf("spares of %q, want minimal (the newest sandbox's)", got)
	}
}
