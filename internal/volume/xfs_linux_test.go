//go:build linux

package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/atomicfile"
	"github.com/hiloop/hiloop/internal/mountinfo"
	"github.com/hiloop/hiloop/internal/testenv"
)

func newTestXFS(t testing.TB) *XFS {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	x, err := NewXFS(filepath.Join(dir, "volumes"))
	if err != nil {
		t.Fatalf("NewXFS: %v", err)
	}
	t.Cleanup(func() {
		// Leave no mount or loop device behind even when a test fails half-way.
		ids, _ := x.List(context.Background())
		for _, id := range ids {
			if err := x.Delete(context.Background(), id); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := x.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		assertPoolReleased(t, x)
	})
	return x
}

// assertPoolReleased checks that a closed driver left nothing of its pool in the kernel.
func assertPoolReleased(t testing.TB, x *XFS) {
	t.Helper()
	if under, err := mountinfo.Under(x.Dir()); err != nil || len(under) > 0 {
		t.Errorf("mounts left at or under %s: %v (err %v)", x.Dir(), under, err)
	}
	if x.Pool() == "" {
		return
	}
	if devs, err := loopDevicesFor(x.Pool(), false); err != nil || len(devs) > 0 {
		t.Errorf("pool %s still has loop devices %v (err %v)", x.Pool(), devs, err)
	}
}

// assertReleased checks that nothing of volume id is left in the kernel: no mount, no loop device.
func assertReleased(t *testing.T, x *XFS, id string) {
	t.Helper()
	if _, mounted, err := mountinfo.At(x.mountpoint(id)); err != nil || mounted {
		t.Errorf("volume %s still mounted (err %v)", id, err)
	}
	devs, err := loopDevicesFor(x.image(id), false)
	if err != nil || len(devs) > 0 {
		t.Errorf("volume %s still has loop devices %v (err %v)", id, devs, err)
	}
}

// assertReflink checks that the filesystem at dir clones files (FICLONE), as snapshots need.
func assertReflink(t *testing.T, dir string) {
	t.Helper()
	src, err := os.Create(filepath.Join(dir, "reflink-src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := src.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(filepath.Join(dir, "reflink-dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		t.Errorf("FICLONE on the volume: %v (reflink off?)", err)
	}
}

func countMounts(t *testing.T, target string) int {
	t.Helper()
	ms, err := mountinfo.Self()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.Mountpoint == target {
			n++
		}
	}
	return n
}

func TestXFSLifecycle(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-life"

	in, err := x.Create(ctx, id, 0, 1000, 1000)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if in.ID != id || in.CapacityBytes != 10<<30 || !in.Resizable {
		t.Errorf("Create info = %+v, want 10 GiB resizable", in)
	}
	if _, err := os.Stat(x.image(id) + ".creating"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary image left behind: %v", err)
	}
	if in2, err := x.Create(ctx, id, 10, 1000, 1000); err != nil || in2 != in {
		t.Errorf("Create again = %+v, %v; want %+v, nil", in2, err, in)
	}
	if _, err := x.Create(ctx, id, 5, 1000, 1000); !errors.Is(err, ErrExists) {
		t.Errorf("Create with another size: err = %v, want ErrExists", err)
	}
	if ids, err := x.List(ctx); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v, %v", ids, err)
	}
	assertReleased(t, x, id)

	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatalf("Mount: %v", err)
	}
	if mnt != x.mountpoint(id) {
		t.Errorf("Mount = %s, want %s", mnt, x.mountpoint(id))
	}
	st, err := os.Stat(mnt)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 1000 || sys.Gid != 1000 || st.Mode().Perm() != 0o755 {
		t.Errorf("root is %d:%d %v, want 1000:1000 0755", sys.Uid, sys.Gid, st.Mode().Perm())
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(mnt, &sfs); err != nil || sfs.Type != unix.XFS_SUPER_MAGIC {
		t.Errorf("mounted fs type %#x (err %v), want XFS", sfs.Type, err)
	}
	if mnt2, err := x.Mount(ctx, id); err != nil || mnt2 != mnt {
		t.Errorf("Mount again = %s, %v", mnt2, err)
	}
	if n := countMounts(t, mnt); n != 1 {
		t.Errorf("%d mounts at %s after two Mounts, want 1", n, mnt)
	}
	if devs, _ := loopDevicesFor(x.image(id), false); len(devs) != 1 {
		t.Errorf("loop devices for the image: %v, want one", devs)
	}

	in, err = x.Info(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Info is the provisioned size, mounted or not; the filesystem is a little smaller.
	if in.CapacityBytes != 10<<30 || !in.Resizable {
		t.Errorf("mounted Info = %+v, want 10 GiB", in)
	}
	if fsBytes := statfsBytes(t, mnt); fsBytes > 10<<30 || fsBytes < 9<<30 {
		t.Errorf("mounted filesystem has %d bytes, want about 10 GiB", fsBytes)
	}

	data := []byte("durable workspace\n")
	if err := os.WriteFile(filepath.Join(mnt, "file.txt"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	assertReflink(t, mnt)

	if err := x.Unmount(ctx, id); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	assertReleased(t, x, id)
	if err := x.Unmount(ctx, id); err != nil {
		t.Errorf("Unmount again: %v", err)
	}
	if in, err := x.Info(ctx, id); err != nil || in.CapacityBytes != 10<<30 {
		t.Errorf("unmounted Info = %+v, %v; want the image size", in, err)
	}

	mnt, err = x.Mount(ctx, id)
	if err != nil {
		t.Fatalf("remount: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "file.txt")); err != nil || string(got) != string(data) {
		t.Errorf("after remount file = %q, %v; want %q", got, err, data)
	}

	if err := x.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	assertReleased(t, x, id)
	if _, err := os.Stat(x.image(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image still there after Delete: %v", err)
	}
	if _, err := os.Stat(mnt); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mount point still there after Delete: %v", err)
	}
	if err := x.Delete(ctx, id); err != nil {
		t.Errorf("Delete again: %v", err)
	}
	if _, err := x.Info(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Info after Delete: %v, want ErrNotFound", err)
	}
	if _, err := x.Mount(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Mount after Delete: %v, want ErrNotFound", err)
	}
	if ids, err := x.List(ctx); err != nil || len(ids) != 0 {
		t.Errorf("List after Delete = %v, %v", ids, err)
	}
}

func TestXFSBadArguments(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	if _, err := x.Create(ctx, "../escape", 1, 0, 0); err == nil {
		t.Error("Create accepted a path as id")
	}
	if _, err := x.Create(ctx, "sb-neg", -1, 0, 0); err == nil {
		t.Error("Create accepted a negative size")
	}
	if _, err := x.Mount(ctx, "sb-missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Mount of a missing volume: %v, want ErrNotFound", err)
	}
	if err := x.Unmount(ctx, "sb-missing"); err != nil {
		t.Errorf("Unmount of a missing volume: %v", err)
	}
	if err := x.Delete(ctx, "sb-missing"); err != nil {
		t.Errorf("Delete of a missing volume: %v", err)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := x.Create(ctx2, "sb-cancelled", 1, 0, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a cancelled context: %v", err)
	}
	if ids, _ := x.List(ctx); len(ids) != 0 {
		t.Errorf("List = %v after failed creates, want none", ids)
	}
}

func TestXFSCrashedCreateIsCleanedUp(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-crashed"
	// What a crash between truncate and rename leaves.
	if err := os.WriteFile(x.image(id)+".creating", []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ids, err := x.List(ctx); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v, %v; want the half-created volume", ids, err)
	}
	if _, err := x.Info(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Info of a half-created volume: %v, want ErrNotFound", err)
	}
	if err := x.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if ids, _ := x.List(ctx); len(ids) != 0 {
		t.Errorf("List after Delete = %v", ids)
	}
	// And Create over such a leftover works.
	if err := os.WriteFile(x.image(id)+".creating", []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Create(ctx, id, 1, 0, 0); err != nil {
		t.Fatalf("Create over a leftover: %v", err)
	}
	if _, err := x.Mount(ctx, id); err != nil {
		t.Fatalf("Mount: %v", err)
	}
}

// mountedWithAFileOpen creates and mounts volume id and opens a file in it, which keeps it busy.
func mountedWithAFileOpen(t *testing.T, x *XFS, id string) *os.File {
	t.Helper()
	ctx := context.Background()
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(mnt, "open"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestXFSUnmountBusy(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-busy"
	f := mountedWithAFileOpen(t, x, id)
	if err := x.Unmount(ctx, id); !errors.Is(err, ErrBusy) {
		t.Errorf("Unmount with an open file: %v, want ErrBusy", err)
	}
	if err := x.Delete(ctx, id); !errors.Is(err, ErrBusy) {
		t.Errorf("Delete with an open file: %v, want ErrBusy", err)
	}
	if _, err := os.Stat(x.image(id)); err != nil {
		t.Errorf("a refused Delete removed the image: %v", err)
	}
	f.Close()
	if err := x.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	assertReleased(t, x, id)
}

// A volume busy for a moment (a copy of its mount in a namespace the kernel is still tearing
// down; here an open file closed a little later) is unmounted once it is free, not refused.
func TestXFSUnmountWaitsForAMomentarilyBusyVolume(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-moment"
	f := mountedWithAFileOpen(t, x, id)
	closed := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { f.Close(); close(closed) })
	if err := x.Unmount(ctx, id); err != nil {
		t.Fatalf("Unmount of a volume free after a moment: %v", err)
	}
	select {
	case <-closed:
	default:
		t.Fatal("Unmount returned before the file holding the volume was closed")
	}
	assertReleased(t, x, id)
}

// A loop device that no mount holds but that is not free yet (the kernel tearing down a gone
// sandbox's mounts late, here an open descriptor of the device) is waited for past the two
// seconds a mount elsewhere gets before the unmount calls the volume busy.
func TestXFSUnmountWaitsForALateRelease(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-late"
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Mount(ctx, id); err != nil {
		t.Fatal(err)
	}
	devs, err := loopDevicesFor(x.image(id), false)
	if err != nil || len(devs) != 1 {
		t.Fatalf("loop devices of the mounted volume: %v, %v", devs, err)
	}
	dev, err := os.Open(devs[0])
	if err != nil {
		t.Fatal(err)
	}
	released := time.AfterFunc(loopHeldWait+time.Second, func() { dev.Close() })
	defer released.Stop()
	if err := x.Unmount(ctx, id); err != nil {
		t.Fatalf("Unmount while the device is released late: %v", err)
	}
	assertReleased(t, x, id)
}

// A mount namespace made while a workspace is mounted (a container starting, an image build)
// holds a copy of its mount. The unmount reaches a slave copy and frees the loop device; a
// private copy keeps it, and the busy error names the process that holds it and where.
func TestXFSUnmountWithNamespaceCopy(t *testing.T) {
	for _, propagation := range []string{"slave", "private"} {
		t.Run(propagation, func(t *testing.T) {
			ctx := context.Background()
			x := newTestXFS(t)
			const id = "sb-ns"
			if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
				t.Fatal(err)
			}
			if _, err := x.Mount(ctx, id); err != nil {
				t.Fatal(err)
			}
			holder, stop := testenv.MountNamespace(t, propagation)
			err := x.Unmount(ctx, id)
			if propagation == "private" {
				want := fmt.Sprintf("pid %d (sleep) at %s", holder, x.mountpoint(id))
				if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), want) {
					t.Errorf("Unmount with a private copy: %v; want ErrBusy naming %q", err, want)
				}
				stop()
				err = x.Unmount(ctx, id)
			}
			if err != nil {
				t.Fatalf("Unmount: %v", err)
			}
			assertReleased(t, x, id)
		})
	}
}

func TestXFSLeftoverLoopDeviceIsDetached(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-leftover"
	if _, err := x.Create(ctx, id, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	// A device bound without autoclear, as by a hand-run losetup or an older daemon.
	dev, fd, err := loopAttach(x.image(id))
	if err != nil {
		t.Fatal(err)
	}
	info, err := unix.IoctlLoopGetStatus64(fd)
	if err != nil {
		t.Fatal(err)
	}
	info.Flags &^= unix.LO_FLAGS_AUTOCLEAR
	if err := unix.IoctlLoopSetStatus64(fd, info); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if devs, _ := loopDevicesFor(x.image(id), false); len(devs) != 1 || devs[0] != dev {
		t.Fatalf("loop devices %v, want [%s]", devs, dev)
	}
	if err := x.Unmount(ctx, id); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	assertReleased(t, x, id)
}

func TestXFSParallelVolumes(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 4 {
		id := fmt.Sprintf("sb-par-%d", i)
		wg.Go(func() {
			for range 2 { // the same id twice at once: idempotent, serialized
				wg.Go(func() {
					if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
						errs <- err
						return
					}
					mnt, err := x.Mount(ctx, id)
					if err != nil {
						errs <- err
						return
					}
					if err := os.WriteFile(filepath.Join(mnt, "id"), []byte(id), 0o644); err != nil {
						errs <- err
					}
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range 4 {
		id := fmt.Sprintf("sb-par-%d", i)
		if got, err := os.ReadFile(filepath.Join(x.mountpoint(id), "id")); err != nil || string(got) != id {
			t.Errorf("volume %s holds %q, %v", id, got, err)
		}
		if n := countMounts(t, x.mountpoint(id)); n != 1 {
			t.Errorf("volume %s mounted %d times", id, n)
		}
	}
	for i := range 4 {
		id := fmt.Sprintf("sb-par-%d", i)
		wg.Go(func() {
			if err := x.Delete(ctx, id); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range 4 {
		assertReleased(t, x, fmt.Sprintf("sb-par-%d", i))
	}
}

func TestXFSGrow(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-grow"
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := x.Info(ctx, id)

	start := time.Now()
	in, err := x.Grow(ctx, id, 3)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Grow mounted: %v", err)
	}
	t.Logf("online grow 1 -> 3 GiB (mounted): %v", elapsed)
	if in.CapacityBytes != 3<<30 || before.CapacityBytes != 1<<30 {
		t.Errorf("after Grow to 3 GiB capacity = %d (before %d)", in.CapacityBytes, before.CapacityBytes)
	}
	if fsBytes := statfsBytes(t, mnt); fsBytes < 2<<30+(1<<30)/2 {
		t.Errorf("after an online Grow to 3 GiB the mounted fs has %d bytes", fsBytes)
	}
	if got, _ := x.Info(ctx, id); got != in {
		t.Errorf("Info = %+v, Grow said %+v", got, in)
	}
	if _, err := os.Stat(filepath.Join(mnt, "keep")); err != nil {
		t.Errorf("data lost by Grow: %v", err)
	}
	if in2, err := x.Grow(ctx, id, 3); err != nil || in2 != in {
		t.Errorf("Grow to the same size = %+v, %v", in2, err)
	}
	if _, err := x.Grow(ctx, id, 2); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Grow smaller: %v, want ErrUnsupported", err)
	}

	if err := x.Unmount(ctx, id); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	in, err = x.Grow(ctx, id, 5)
	elapsed = time.Since(start)
	if err != nil {
		t.Fatalf("Grow unmounted: %v", err)
	}
	t.Logf("grow 3 -> 5 GiB (unmounted, mounts for the duration): %v", elapsed)
	if in.CapacityBytes != 5<<30 {
		t.Errorf("unmounted Grow info = %+v, want 5 GiB", in)
	}
	assertReleased(t, x, id)
	if _, err := x.Mount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if fsBytes := statfsBytes(t, mnt); fsBytes < 4<<30+(1<<30)/2 {
		t.Errorf("after an unmounted Grow to 5 GiB the fs has %d bytes", fsBytes)
	}
	if _, err := x.Grow(ctx, "sb-missing", 5); !errors.Is(err, ErrNotFound) {
		t.Errorf("Grow of a missing volume: %v, want ErrNotFound", err)
	}
}

// TestXFSCreateMountTime reports what a sandbox create pays for its workspace.
func TestXFSCreateMountTime(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	var create, mount, unmount time.Duration
	const n = 5
	for i := range n {
		id := fmt.Sprintf("sb-time-%d", i)
		t0 := time.Now()
		if _, err := x.Create(ctx, id, 10, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if _, err := x.Mount(ctx, id); err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		if err := x.Unmount(ctx, id); err != nil {
			t.Fatal(err)
		}
		t3 := time.Now()
		create += t1.Sub(t0)
		mount += t2.Sub(t1)
		unmount += t3.Sub(t2)
	}
	t.Logf("10 GiB volume, mean of %d: create %v, mount %v, unmount %v", n, create/n, mount/n, unmount/n)
}

func BenchmarkXFSCreateMount10GiB(b *testing.B) {
	ctx := context.Background()
	x := newTestXFS(b)
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("sb-bench-%d", i)
		i++
		if _, err := x.Create(ctx, id, 10, 1000, 1000); err != nil {
			b.Fatal(err)
		}
		if _, err := x.Mount(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := x.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// statfsBytes is the size of the filesystem mounted at dir as df sees it.
func statfsBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	return int64(sfs.Blocks) * int64(sfs.Bsize)
}

// An image deleted while its volume is mounted (an operator's rm in the data dir) leaves a mount
// and a loop device reading the unlinked file; List must still report the volume and Delete or
// Unmount must release both.
func TestXFSImageDeletedWhileMounted(t *testing.T) {
	for _, release := range []string{"Delete", "Unmount"} {
		t.Run(release, func(t *testing.T) {
			ctx := context.Background()
			x := newTestXFS(t)
			const id = "sb-gone"
			if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
				t.Fatal(err)
			}
			mnt, err := x.Mount(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("data"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(x.image(id)); err != nil {
				t.Fatal(err)
			}
			if !hasDeletedLoop(t, x.image(id)) {
				t.Fatal("no loop device shows its image as deleted")
			}
			if ids, err := x.List(ctx); err != nil || !slices.Equal(ids, []string{id}) {
				t.Errorf("List = %v, %v; want [%s]", ids, err, id)
			}
			if release == "Delete" {
				err = x.Delete(ctx, id)
			} else {
				err = x.Unmount(ctx, id)
			}
			if err != nil {
				t.Fatalf("%s: %v", release, err)
			}
			assertReleased(t, x, id)
			if _, err := os.Stat(mnt); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("mount point left: %v", err)
			}
			if ids, err := x.List(ctx); err != nil || len(ids) != 0 {
				t.Errorf("List after %s = %v, %v", release, ids, err)
			}
		})
	}
}

// A loop device bound without autoclear to an image deleted since (no mount left) is found by
// List, not reused by a Mount of a new volume of that id, and detached by Delete.
func TestXFSStaleLoopOfDeletedImage(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-stale"
	if _, err := x.Create(ctx, id, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	stale, fd, err := loopAttach(x.image(id))
	if err != nil {
		t.Fatal(err)
	}
	info, err := unix.IoctlLoopGetStatus64(fd)
	if err != nil {
		t.Fatal(err)
	}
	info.Flags &^= unix.LO_FLAGS_AUTOCLEAR
	if err := unix.IoctlLoopSetStatus64(fd, info); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	t.Cleanup(func() { _ = loopDetach(stale) })
	if err := os.Remove(x.image(id)); err != nil {
		t.Fatal(err)
	}
	if ids, err := x.List(ctx); err != nil || !slices.Equal(ids, []string{id}) {
		t.Errorf("List = %v, %v; want [%s] found by its loop device", ids, err, id)
	}

	if _, err := x.Create(ctx, id, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if m, _, _ := mountinfo.At(mnt); m.Source == stale {
		t.Errorf("Mount reused %s, bound to the deleted image", stale)
	}
	if err := x.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	assertReleased(t, x, id)
}

// hasDeletedLoop reports whether a loop device is bound to image and shows it as deleted.
func hasDeletedLoop(t *testing.T, image string) bool {
	t.Helper()
	loops, err := loopBackingFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range loops {
		if l.file == image && l.deleted {
			return true
		}
	}
	return false
}

// A daemon killed during a restore leaves the copy beside the image it was to replace, mounted
// if the restore was growing it, and the volume lives on, so no Delete removes the copy: the
// next start of the driver does, and leaves the volume of a running sandbox mounted.
func TestXFSRestartRemovesInterruptedCopies(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const running, restored = "sb-running", "sb-restored"
	for _, id := range []string{running, restored} {
		if _, err := x.Create(ctx, id, 1, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	mnt, err := x.Mount(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	// A format cut short beside a mounted volume, and a restore's copy mounted for its growth.
	if err := os.WriteFile(x.image(running)+".creating", []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := x.image(restored) + ".creating"
	if _, err := x.copyImage(ctx, x.image(restored), tmp, "", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := x.mountImage(restored, tmp, x.mountpoint(restored)); err != nil {
		t.Fatal(err)
	}

	x2, err := NewXFS(x.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running, restored} {
		if _, err := os.Stat(x.image(id) + ".creating"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s.img.creating survived the restart: %v", id, err)
		}
		if _, err := x2.Info(ctx, id); err != nil {
			t.Errorf("volume %s after the restart: %v", id, err)
		}
	}
	if n := countMounts(t, x.mountpoint(restored)); n != 0 {
		t.Errorf("the restore's copy is still mounted %d times", n)
	}
	if devs, err := loopDevicesFor(tmp, false); err != nil || len(devs) != 0 {
		t.Errorf("loop devices on the restore's copy: %v, %v", devs, err)
	}
	if n := countMounts(t, mnt); n != 1 {
		t.Errorf("the running sandbox's volume is mounted %d times after the restart, want 1", n)
	}
}

// What a sandbox deletes in its workspace goes back to the host once trimmed: the blocks are
// punched out of its image and, through the pool (mounted with discard), out of the pool image.
func TestXFSDeletedDataFreesHostSpace(t *testing.T) {
	x := newTestXFS(t)
	ctx := context.Background()
	if _, err := x.Create(ctx, "ws", 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, "ws")
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(mnt, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := fill(t, data); !errors.Is(err, unix.ENOSPC) || n < 800<<20 {
		t.Fatalf("filled %d bytes: %v", n, err)
	}
	syncFS(t, mnt)
	img := x.image("ws")
	full := allocated(t, img)
	var pool int64
	if x.Pool() != "" {
		syncFS(t, x.Dir())
		pool = allocated(t, x.Pool())
	}
	if full < 800<<20 {
		t.Fatalf("the image holds %d bytes after the fill", full)
	}
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	syncFS(t, mnt)
	if err := x.TrimAll(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := testenv.Deadline(t)
	for {
		syncFS(t, mnt)
		syncFS(t, x.Dir())
		freed := allocated(t, img) < full-(600<<20)
		if freed && x.Pool() != "" {
			freed = allocated(t, x.Pool()) < pool-(600<<20)
		}
		if freed {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("after the rm the image holds %d bytes (%d full), the pool image %d (%d full)",
				allocated(t, img), full, allocated(t, x.Pool()), pool)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A failed fsync of the volumes' directory fails the operation that renamed or removed in it,
// naming what is not durable, rather than reporting it done.
func TestXFSFailedDirSyncFails(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	eio := errors.New("sync: input/output error")
	syncDirectory = func(string) error { return eio }
	defer func() { syncDirectory = atomicfile.SyncDir }()

	const id = "sb-unsynced"
	if _, err := x.Create(ctx, id, 1, 0, 0); !errors.Is(err, atomicfile.ErrNotDurable) || !errors.Is(err, eio) {
		t.Errorf("Create with a failing dir sync: %v, want ErrNotDurable and the cause", err)
	}
	if err := x.Delete(ctx, id); !errors.Is(err, atomicfile.ErrNotDurable) || !errors.Is(err, eio) {
		t.Errorf("Delete with a failing dir sync: %v, want ErrNotDurable and the cause", err)
	}
	syncDirectory = atomicfile.SyncDir
	// Run again, Delete finds nothing to remove and syncs.
	if err := x.Delete(ctx, id); err != nil {
		t.Errorf("Delete again: %v", err)
	}
}
