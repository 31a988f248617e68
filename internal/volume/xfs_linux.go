//go:build linux

package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/atomicfile"
	"github.com/hiloop/hiloop/internal/mountinfo"
)

// XFS is the resizable volume driver: every volume is an XFS filesystem (reflink on) in a sparse
// image file, mounted through a loop device. The images live on a filesystem that clones files
// (FICLONE), so a snapshot is a reflink copy; where the host filesystem cannot (ext4), NewXFS
// makes that filesystem: an XFS pool in a sparse image next to the directory, mounted on it.
// The layout:
//
//	<dir>.pool.img                   the pool image, when the host filesystem lacks reflink
//	<dir>/<id>.img                   the volume's image file
//	<dir>/<id>.img.creating          an image being formatted, copied or restored; a leftover
//	                                 from a crash is removed by Delete and by NewXFS
//	<dir>/mnt/<id>                   the mount point while mounted
//	<dir>/snapshots/<snap>.img       a sealed snapshot: a copy of a frozen volume image
//	<dir>/snapshots/<snap>.img.sealing  a snapshot being copied
//
// Copies keep their source's XFS UUID, so every volume is mounted with nouuid: XFS otherwise
// refuses to mount a fork beside the volume it came from.
type XFS struct {
	dir       string // absolute, symlinks resolved: mount points are compared with mountinfo
	pool      string // the pool image mounted on dir, or "" when dir's own filesystem is used
	mkfs      string
	xfsGrowfs string // empty when xfsprogs lacks it; Grow then fails
	// fsType and fsData are what an image is mounted as: "xfs" with nouuid (see above) for
	// volumes; Layers keeps ext4 images in an XFS driver. Not discard: a workspace that writes
	// and deletes the same data again and again then allocates it afresh through two loop
	// devices every time (a 1 GiB write-and-delete loop ran at 128 MB/s against 789 MB/s
	// without); Trim gives deleted data back instead.
	fsType, fsData string
	// clone makes dst share src's blocks (FICLONE); nil where the filesystem cannot, and then
	// copies are sparse copies. Tests replace it to exercise the fallback.
	clone     func(dst, src *os.File) error
	locks     idLocks    // by volume id
	snapLocks idLocks    // by snapshot id; taken after a volume's lock, never before
	templates sync.Mutex // making a template (template_linux.go)
}

var (
	_ Driver      = (*XFS)(nil)
	_ Grower      = (*XFS)(nil)
	_ Snapshotter = (*XFS)(nil)
)

// NewXFS returns the XFS driver keeping its volumes under dir, creating dir if needed. Where
// dir's filesystem cannot clone files it sets up the reflink pool <dir>.pool.img (sized to the
// host filesystem, sparse) and mounts it on dir, or mounts the pool an earlier run made; a pool
// already mounted there is used as it is. It fails with an error wrapping ErrUnsupported when
// the host has no loop devices or no mkfs.xfs, so the caller can fall back to the dir driver.
func NewXFS(dir string) (*XFS, error) {
	if dir == "" {
		return nil, errors.New("xfs volume driver: empty directory")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return nil, fmt.Errorf("xfs volume driver: no loop devices (%w): %w", err, ErrUnsupported)
	}
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		return nil, fmt.Errorf("xfs volume driver: mkfs.xfs not found, install xfsprogs: %w", ErrUnsupported)
	}
	growfs, _ := exec.LookPath("xfs_growfs")
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// Root's alone: a sandbox's workspace reaches it through an idmapped mount its runtime
	// opens as host root, and the data dir above is open to passing through (for sandboxes'
	// roots to reach their root filesystems), so what is below must not be.
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	x := &XFS{dir: resolved, mkfs: mkfs, xfsGrowfs: growfs, fsType: "xfs", fsData: "nouuid", clone: fileClone}
	if err := x.openPool(); err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	// Also when the pool was mounted already, by a daemon that made it 0711.
	if err := os.Chmod(resolved, 0o700); err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	mnt := filepath.Join(resolved, "mnt")
	err = os.MkdirAll(mnt, 0o700)
	if err == nil {
		err = os.Chmod(mnt, 0o700) // 0711 before user namespaces
	}
	if err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	if err := os.MkdirAll(x.snapshotsDir(), 0o700); err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	// The pool is a shared mount of its own, so mnt needs no bind to be one.
	if x.pool == "" {
		if err := makeShared(mnt); err != nil {
			return nil, fmt.Errorf("xfs volume driver: %w", err)
		}
	}
	reflink, err := reflinkSupported(resolved)
	if err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	if !reflink {
		x.clone = nil
	}
	thawAll(mnt)
	cleanSealMounts(mnt)
	x.cleanCreating()
	return x, nil
}

// cleanCreating removes the images a daemon killed while making them left behind: a format, a
// fork's copy, or a restore's copy beside the image it was to replace, which no later Delete
// removes since the volume lives on. The copy a restore was growing is mounted at the volume's
// mount point; that mount goes with it, and only that one: a volume still mounted there for its
// running sandbox stays. Nothing is being made while the driver starts.
func (x *XFS) cleanCreating() {
	ctx := context.Background()
	files, _ := filepath.Glob(filepath.Join(x.dir, "*.img.creating"))
	for _, f := range files {
		id, ok := x.imageID(f)
		if !ok {
			continue
		}
		mnt := x.mountpoint(id)
		devs, _ := loopDevicesFor(f, false)
		if m, mounted, err := mountinfo.At(mnt); err == nil && mounted && slices.Contains(devs, m.Source) {
			if err := x.unmountImage(ctx, id, f, mnt); err != nil {
				continue // Delete tries again
			}
		} else if err := releaseLoops(ctx, "volume "+id, f); err != nil {
			continue
		}
		_ = removeImage(f)
	}
	// Best effort, as the removals are: what a crash brings back, the next start removes.
	_ = syncDir(x.dir)
}

// makeShared makes dir a mount point of its own in a shared peer group (as Docker does for its
// data dir). Every mount namespace created later holds copies of the workspaces mounted then;
// with shared mounts, the unmount at a stop propagates into the namespaces that took them as
// slaves (containers, image builds), so their copies do not keep the loop device busy.
func makeShared(dir string) error {
	m, mounted, err := mountinfo.At(dir)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", dir, err)
		}
		// A bind of a shared mount joins its peer group; every workspace mounted under it would
		// then be mounted a second time, hidden, on the parent. A group of its own avoids that.
		if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make %s private: %w", dir, err)
		}
	} else if strings.Contains(m.Optional, "shared:") {
		return nil
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// Close releases the driver's mounts once no volume is mounted: the shared mount point, then
// the pool and its loop device (the pool image stays; it is never deleted here). A daemon that
// leaves sandboxes running keeps them (an error wrapping ErrBusy); Close is for tearing a data
// dir down. The driver is not to be used after it.
func (x *XFS) Close() error {
	mnt := filepath.Join(x.dir, "mnt")
	under, err := mountinfo.Under(mnt)
	if err != nil {
		return err
	}
	if vols := slices.DeleteFunc(slices.Clone(under), func(t string) bool { return t == mnt }); len(vols) > 0 {
		return fmt.Errorf("xfs volume driver: %d volumes still mounted under %s: %w", len(vols), mnt, ErrBusy)
	}
	if len(under) > 0 {
		if err := unix.Unmount(mnt, 0); err != nil {
			return fmt.Errorf("xfs volume driver: unmount %s: %w", mnt, err)
		}
	}
	if x.pool != "" {
		return x.closePool()
	}
	return nil
}

// Name returns "xfs".
func (x *XFS) Name() string { return "xfs" }

// Resizable is true: an XFS image is sized at create and grows online.
func (x *XFS) Resizable() bool { return true }

// Dir returns the directory holding the volumes (absolute, symlinks resolved).
func (x *XFS) Dir() string { return x.dir }

func (x *XFS) image(id string) string      { return filepath.Join(x.dir, id+".img") }
func (x *XFS) mountpoint(id string) string { return filepath.Join(x.dir, "mnt", id) }

// Create makes a sparse image of sizeGiB (DefaultSizeGiB when 0) holding an empty XFS whose root
// is owned by uid:gid with mode 0755. It does not mount it. An existing volume of the same size is
// left as it is; one of another size is an error wrapping ErrExists. A size larger than the free
// space (FreeBytes) is refused with a *NoSpaceError.
func (x *XFS) Create(ctx context.Context, id string, sizeGiB int, uid, gid int) (Info, error) {
	if err := validID(id); err != nil {
		return Info{}, err
	}
	if sizeGiB < 0 {
		return Info{}, fmt.Errorf("volume %s: invalid size %d GiB", id, sizeGiB)
	}
	if sizeGiB == 0 {
		sizeGiB = DefaultSizeGiB
	}
	if uid < 0 || gid < 0 {
		return Info{}, fmt.Errorf("volume %s: invalid owner %d:%d", id, uid, gid)
	}
	size := int64(sizeGiB) << 30
	unlock := x.locks.lock(id)
	defer unlock()

	img := x.image(id)
	if st, err := os.Stat(img); err == nil {
		if st.Size() != size {
			return Info{}, fmt.Errorf("volume %s has %d GiB, not %d: %w", id, st.Size()>>30, sizeGiB, ErrExists)
		}
		return x.info(id)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	// The image is sparse, but a capacity the pool cannot hold is not promised.
	if err := x.checkFree(size); err != nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}

	// Made under a temporary name and renamed: a crash leaves either nothing or a .creating
	// file that List reports and Delete removes, never a half-made <id>.img.
	tmp := img + ".creating"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Info{}, err
	}
	// A reflink of an empty filesystem of this size and owner, formatted once (see template).
	format := func(ctx context.Context, img string) error { return x.format(ctx, img, uid, gid) }
	made := false
	if x.clone != nil {
		tmpl, err := x.template(ctx, fmt.Sprintf("xfs-%d-%d-%d", sizeGiB, uid, gid), sizeGiB, format)
		if err != nil {
			return Info{}, fmt.Errorf("volume %s: %w", id, err)
		}
		switch err := x.reflinkTemplate(tmpl, tmp); {
		case err == nil:
			made = true
		case !cloneUnsupported(err):
			return Info{}, fmt.Errorf("volume %s: %w", id, err)
		}
	}
	if !made {
		if err := makeImage(ctx, tmp, sizeGiB, format); err != nil {
			return Info{}, fmt.Errorf("volume %s: %w", id, err)
		}
	}
	return x.publish(id, tmp)
}

// publish gives the image made at tmp volume id's name, for good, and reports the volume; a
// failed rename removes tmp.
func (x *XFS) publish(id, tmp string) (Info, error) {
	if err := os.Rename(tmp, x.image(id)); err != nil {
		os.Remove(tmp)
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	if err := syncDir(x.dir); err != nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	return x.info(id)
}

// format runs mkfs.xfs on the image file. The root's owner comes from a prototype file, so
// setting it needs no mount. mkfs.xfs fsyncs the image before it exits.
func (x *XFS) format(ctx context.Context, image string, uid, gid int) error {
	proto, err := os.CreateTemp("", "hiloop-xfs-proto-*")
	if err != nil {
		return err
	}
	defer os.Remove(proto.Name())
	// Boot image name (ignored), block and inode counts (ignored), the root directory, end.
	_, err = fmt.Fprintf(proto, "/dev/null\n0 0\nd--755 %d %d\n$\n", uid, gid)
	if cerr := proto.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// -K: skip discarding the blocks of a file that is all holes anyway.
	cmd := exec.CommandContext(ctx, x.mkfs, "-q", "-K", "-m", "reflink=1", "-p", proto.Name(), image)
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("mkfs.xfs: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Mount attaches the image to a free loop device and mounts it (nosuid, nodev) at
// <dir>/mnt/<id>. A mounted volume is left as it is.
func (x *XFS) Mount(ctx context.Context, id string) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	unlock := x.locks.lock(id)
	defer unlock()
	return x.mount(id)
}

func (x *XFS) mount(id string) (string, error) {
	return x.mountImage(id, x.image(id), x.mountpoint(id))
}

// mountImage mounts img, volume id's image or a copy being made of one, at mnt.
func (x *XFS) mountImage(id, img, mnt string) (string, error) {
	if _, err := os.Stat(img); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("volume %s: %w", id, ErrNotFound)
		}
		return "", err
	}
	if mounted, err := mountinfo.Mounted(mnt); err != nil {
		return "", err
	} else if mounted {
		return mnt, nil
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return "", fmt.Errorf("volume %s: %w", id, err)
	}
	// A loop device still bound to the image (its filesystem still mounted in a namespace that
	// did not see the unmount) is mounted again rather than doubled: the kernel then shares one
	// superblock, where two devices would be two filesystems writing the same image. One bound
	// to a deleted image of the same name holds another filesystem and is left alone.
	var dev string
	if devs, err := loopDevicesFor(img, true); err != nil {
		return "", err
	} else if len(devs) > 0 {
		dev = devs[0]
	} else {
		var fd int
		dev, fd, err = loopAttach(img)
		if err != nil {
			return "", fmt.Errorf("volume %s: %w", id, err)
		}
		// Once mounted the mount holds the device; if the mount fails this close frees it.
		defer unix.Close(fd)
	}
	// nouuid (volumes): a fork or a restored copy has the UUID of the volume it came from. nosuid and
	// nodev: a setuid binary or a device node a sandbox wrote must not work for a host user
	// who reaches the mount. The sandbox's /workspace is a bind remounted with flags of its own.
	if err := unix.Mount(dev, mnt, x.fsType, unix.MS_NOSUID|unix.MS_NODEV, x.fsData); err != nil {
		return "", fmt.Errorf("volume %s: mount %s at %s: %w", id, dev, mnt, err)
	}
	return mnt, nil
}

// fitrim is FITRIM, _IOWR('X', 121, struct fstrim_range).
const fitrim = 0xc0185879

// Trim hands the blocks mounted volume id's filesystem no longer uses back to its image, whose
// holes the pool (mounted with discard) passes on to the host: what a sandbox deleted stops
// taking the host's room. An unmounted volume is left as it is (Unmount trims it).
func (x *XFS) Trim(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := x.locks.lock(id)
	defer unlock()
	return x.trim(id)
}

func (x *XFS) trim(id string) error {
	mnt := x.mountpoint(id)
	// Asked of the kernel, not the mount table: TrimAll at the daemon's stop trims every volume,
	// and parsing the table (three lines per sandbox) for each made it quadratic.
	if mounted, err := mountinfo.Mounted(mnt); err != nil || !mounted {
		return err
	}
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	defer unix.Close(fd)
	r := struct{ start, len, minlen uint64 }{0, ^uint64(0), 0}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fitrim, uintptr(unsafe.Pointer(&r))); errno != 0 {
		return fmt.Errorf("volume %s: trim: %w", id, errno)
	}
	return nil
}

// TrimAll trims every mounted volume (see Trim), for a schedule and the daemon's stop.
func (x *XFS) TrimAll(ctx context.Context) error {
	ids, err := x.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		errs = append(errs, x.Trim(ctx, id))
	}
	return errors.Join(errs...)
}

// Unmount unmounts the volume; the kernel then frees its loop device (autoclear). It fails with
// an error wrapping ErrBusy while a process or another mount namespace still uses the volume.
func (x *XFS) Unmount(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := x.locks.lock(id)
	defer unlock()
	// What the sandbox deleted goes back to the host before the volume rests.
	if err := x.trim(id); err != nil {
		return err
	}
	return x.unmount(ctx, id)
}

func (x *XFS) unmount(ctx context.Context, id string) error {
	return x.unmountImage(ctx, id, x.image(id), x.mountpoint(id))
}

// unmountBusyWait is how long unmountImage tries again a volume the kernel says is busy. The
// volume is shared into every mount namespace made while it is mounted (makeShared), and an
// unmount fails while a copy of it is busy: one in the namespace of a container that just
// stopped, which the kernel tears down from deferred work (see loopFreeWait), stayed busy for
// a moment under load and failed a stop (a crash-and-restart soak restarting sandboxes
// several at a time saw it).
const unmountBusyWait = 2 * time.Second

// unmountImage unmounts mnt and makes sure no loop device holds img (see mountImage).
func (x *XFS) unmountImage(ctx context.Context, id, img, mnt string) error {
	start := time.Now()
	poll := 10 * time.Millisecond
	for tries := 0; ; {
		mounted, err := mountinfo.Mounted(mnt)
		if err != nil {
			return err
		}
		if !mounted {
			break
		}
		if tries == 8 { // stacked mounts are peeled one per call; more than a few is not ours
			return fmt.Errorf("volume %s: %s stays mounted after %d unmounts", id, mnt, tries)
		}
		if err := unix.Unmount(mnt, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				if time.Since(start) > unmountBusyWait {
					return fmt.Errorf("volume %s: unmount %s: %w", id, mnt, ErrBusy)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(poll):
				}
				poll = min(2*poll, 250*time.Millisecond)
				continue
			}
			if !errors.Is(err, unix.EINVAL) { // EINVAL: unmounted under us
				return fmt.Errorf("volume %s: unmount %s: %w", id, mnt, err)
			}
		}
		tries++
	}
	if err := releaseLoops(ctx, "volume "+id, img); err != nil {
		return err
	}
	if err := os.Remove(mnt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	return nil
}

// How long releaseLoops waits for a loop device to go: with a mount of it in another process's
// namespace, loopHeldWait, then busy; with none, loopFreeWait. A mount namespace's last process
// gone, the kernel tears its mounts down from deferred work, and under load (four end-to-end
// scripts and a Node harness on two cores) that took more than two seconds after a sandbox's
// processes were all reaped.
const (
	loopHeldWait = 2 * time.Second
	loopFreeWait = 30 * time.Second
)

// releaseLoops makes sure no loop device still holds img, the image of what (e.g. "volume x"):
// autoclear normally frees it within the umount call, but a device bound by hand or by a crashed
// daemon without autoclear is detached here, one kept alive by a mount in another namespace is
// reported as busy, and one the kernel is still releasing is waited for.
func releaseLoops(ctx context.Context, what, img string) error {
	start := time.Now()
	detached := false
	poll := 10 * time.Millisecond
	for {
		devs, err := loopDevicesFor(img, false)
		if err != nil {
			return err
		}
		if len(devs) == 0 {
			return nil
		}
		if !detached {
			for _, dev := range devs {
				if err := loopDetach(dev); err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
			}
			detached = true
			continue
		}
		if waited := time.Since(start); waited > loopHeldWait {
			// Past loopHeldWait, one look per poll at who holds it (every process's mounts).
			if held := holders(devs); held != "" || waited > loopFreeWait {
				return fmt.Errorf("%s: loop device %s still in use%s: %w",
					what, strings.Join(devs, ", "), held, ErrBusy)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		poll = min(2*poll, 250*time.Millisecond)
	}
}

// Delete unmounts the volume and removes its image, including one left half-created by a crash.
func (x *XFS) Delete(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := x.locks.lock(id)
	defer unlock()
	if err := x.unmount(ctx, id); err != nil {
		return err
	}
	for _, p := range []string{x.image(id), x.image(id) + ".creating"} {
		if err := removeImage(p); err != nil {
			return fmt.Errorf("volume %s: %w", id, err)
		}
	}
	if err := syncDir(x.dir); err != nil {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	return nil
}

// Info reports the volume's provisioned capacity: the size of its image, the figure a user
// chose and grows, whether or not the volume is mounted. (df inside shows a little less: XFS
// keeps its log and metadata out of the free space.)
func (x *XFS) Info(ctx context.Context, id string) (Info, error) {
	if err := validID(id); err != nil {
		return Info{}, err
	}
	return x.info(id)
}

func (x *XFS) info(id string) (Info, error) {
	st, err := os.Stat(x.image(id))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Info{}, fmt.Errorf("volume %s: %w", id, ErrNotFound)
		}
		return Info{}, err
	}
	return Info{ID: id, CapacityBytes: st.Size(), Resizable: true}, nil
}

// List returns the ids of every volume image, including half-created ones, and of every volume
// still mounted or bound to a loop device whose image is gone (deleted while mounted), so
// Delete can release them.
func (x *XFS) List(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(x.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if id, ok := x.imageID(filepath.Join(x.dir, e.Name())); ok && !e.IsDir() {
			ids = append(ids, id)
		}
	}
	mnt := filepath.Join(x.dir, "mnt")
	under, err := mountinfo.Under(mnt)
	if err != nil {
		return nil, err
	}
	for _, t := range under {
		if id := filepath.Base(t); filepath.Dir(t) == mnt && validID(id) == nil {
			ids = append(ids, id)
		}
	}
	loops, err := loopBackingFiles()
	if err != nil {
		return nil, err
	}
	for _, l := range loops {
		if id, ok := x.imageID(l.file); ok && strings.HasSuffix(l.file, ".img") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// imageID returns the id of the volume whose image, or image being created, is at path.
func (x *XFS) imageID(path string) (string, bool) {
	if filepath.Dir(path) != x.dir {
		return "", false
	}
	name := filepath.Base(path)
	id, ok := strings.CutSuffix(name, ".img")
	if !ok {
		id, ok = strings.CutSuffix(name, ".img.creating")
	}
	return id, ok && validID(id) == nil
}

// Grow enlarges the volume's image to sizeGiB and grows its filesystem online: truncate,
// LOOP_SET_CAPACITY, xfs_growfs. An unmounted volume is mounted for the duration. Shrinking fails
// with an error wrapping ErrUnsupported; the same size only makes sure the filesystem fills the
// image (so a Grow interrupted after the truncate can be retried). A growth larger than the free
// space (FreeBytes) is refused with a *NoSpaceError.
func (x *XFS) Grow(ctx context.Context, id string, sizeGiB int) (Info, error) {
	if err := validID(id); err != nil {
		return Info{}, err
	}
	if sizeGiB <= 0 {
		return Info{}, fmt.Errorf("volume %s: invalid size %d GiB", id, sizeGiB)
	}
	if x.xfsGrowfs == "" {
		return Info{}, fmt.Errorf("volume %s: xfs_growfs not found, install xfsprogs: %w", id, ErrUnsupported)
	}
	unlock := x.locks.lock(id)
	defer unlock()

	img, mnt := x.image(id), x.mountpoint(id)
	st, err := os.Stat(img)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Info{}, fmt.Errorf("volume %s: %w", id, ErrNotFound)
		}
		return Info{}, err
	}
	size := int64(sizeGiB) << 30
	if size < st.Size() {
		return Info{}, fmt.Errorf("volume %s has %d GiB and cannot shrink to %d GiB: %w", id, st.Size()>>30, sizeGiB, ErrUnsupported)
	}
	if size > st.Size() {
		if err := x.checkFree(size - st.Size()); err != nil {
			return Info{}, fmt.Errorf("volume %s: grow to %d GiB: %w", id, sizeGiB, err)
		}
		if err := os.Truncate(img, size); err != nil {
			return Info{}, fmt.Errorf("volume %s: %w", id, err)
		}
	}

	m, mounted, err := mountinfo.At(mnt)
	if err != nil {
		return Info{}, err
	}
	if !mounted {
		if _, err := x.mount(id); err != nil {
			return Info{}, err
		}
		if m, _, err = mountinfo.At(mnt); err != nil {
			return Info{}, err
		}
	}
	growErr := x.growfs(ctx, m.Source, mnt)
	var in Info
	if growErr == nil {
		in, growErr = x.info(id)
	}
	if !mounted {
		if err := x.unmount(context.WithoutCancel(ctx), id); err != nil && growErr == nil {
			growErr = err
		}
		in.CapacityBytes = size
	}
	if growErr != nil {
		return Info{}, growErr
	}
	return in, nil
}

func (x *XFS) growfs(ctx context.Context, dev, mnt string) error {
	if err := loopSetCapacity(dev); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, x.xfsGrowfs, "-d", mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("xfs_growfs %s: %w: %s", mnt, err, bytes.TrimSpace(out))
	}
	return nil
}

// syncDirectory is atomicfile.SyncDir; tests replace it, since a failing fsync of a directory
// cannot be provoked on an ordinary filesystem.
var syncDirectory = atomicfile.SyncDir

// syncDir makes a rename or unlink in dir last through a crash. Its error wraps
// atomicfile.ErrNotDurable: every reader sees the change already, but a crash may undo it (a
// volume's image back under its .creating name, a deleted image back), so the operation
// reports a failure, which its caller handles as it does any other (a sandbox whose create
// failed is deleted; Delete, run again, syncs again) instead of recording it as done.
func syncDir(dir string) error {
	if err := syncDirectory(dir); err != nil {
		return fmt.Errorf("%s: %w: %w", dir, atomicfile.ErrNotDurable, err)
	}
	return nil
}

// holders names processes whose mount namespace still mounts one of devs, for the busy error.
func holders(devs []string) string {
	var out []string
	for _, ns := range mountinfo.Namespaces() {
		i := slices.IndexFunc(ns.Mounts, func(m *mountinfo.Info) bool { return slices.Contains(devs, m.Source) })
		if i < 0 {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ns.PID))
		out = append(out, fmt.Sprintf("pid %d (%s) at %s", ns.PID, strings.TrimSpace(string(comm)), ns.Mounts[i].Mountpoint))
	}
	if len(out) == 0 {
		return ""
	}
	return ": mounted in the mount namespace of " + strings.Join(out, ", ")
}
