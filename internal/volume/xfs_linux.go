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
	"time"

	"golang.org/x/sys/unix"
)

// XFS is the resizable volume driver: every volume is an XFS filesystem (reflink on) in a sparse
// image file, mounted through a loop device. The layout under its directory:
//
//	<dir>/<id>.img           the volume's image file
//	<dir>/<id>.img.creating  an image being formatted; a leftover from a crash is removed by Delete
//	<dir>/mnt/<id>           the mount point while mounted
//
// Snapshots (a later change) belong in <dir>/snapshots/ as reflink copies (FICLONE) of a frozen
// image, falling back to a sparse copy where the host filesystem lacks reflink. A copy keeps its
// source's XFS UUID; give it a fresh one (xfs_admin -U generate) before mounting it beside the
// source, since XFS refuses to mount two filesystems with the same UUID.
type XFS struct {
	dir       string // absolute, symlinks resolved: mount points are compared with mountinfo
	mkfs      string
	xfsGrowfs string // empty when xfsprogs lacks it; Grow then fails
	locks     idLocks
}

var (
	_ Driver = (*XFS)(nil)
	_ Grower = (*XFS)(nil)
)

// NewXFS returns the XFS driver keeping its volumes under dir, creating dir if needed. It fails
// with an error wrapping ErrUnsupported when the host has no loop devices or no mkfs.xfs, so the
// caller can fall back to the dir driver.
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
	// 0711: a user-namespaced container init must be able to traverse to its workspace.
	if err := os.MkdirAll(filepath.Join(abs, "mnt"), 0o711); err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	if err := makeShared(filepath.Join(resolved, "mnt")); err != nil {
		return nil, fmt.Errorf("xfs volume driver: %w", err)
	}
	return &XFS{dir: resolved, mkfs: mkfs, xfsGrowfs: growfs}, nil
}

// makeShared makes dir a mount point of its own in a shared peer group (as Docker does for its
// data dir). Every mount namespace created later holds copies of the workspaces mounted then;
// with shared mounts, the unmount at a stop propagates into the namespaces that took them as
// slaves (containers, image builds), so their copies do not keep the loop device busy.
func makeShared(dir string) error {
	m, mounted, err := mountAt(dir)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", dir, err)
		}
	} else if strings.Contains(m.Optional, "shared:") {
		return nil
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// Close releases the driver's shared mount point once no volume is mounted under it. A daemon
// that leaves sandboxes running keeps it; Close is for tearing a data dir down.
func (x *XFS) Close() error {
	mnt := filepath.Join(x.dir, "mnt")
	under, err := mountsUnder(mnt)
	if err != nil {
		return err
	}
	if len(under) > 1 {
		return fmt.Errorf("xfs volume driver: %d volumes still mounted under %s: %w", len(under)-1, mnt, ErrBusy)
	}
	if len(under) == 1 {
		if err := unix.Unmount(mnt, 0); err != nil {
			return fmt.Errorf("xfs volume driver: unmount %s: %w", mnt, err)
		}
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
// left as it is; one of another size is an error wrapping ErrExists.
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

	// Format under a temporary name and rename: a crash leaves either nothing or a .creating file
	// that List reports and Delete removes, never a half-formatted <id>.img.
	tmp := img + ".creating"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Info{}, err
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Info{}, fmt.Errorf("volume %s: size image: %w", id, err)
	}
	if err := x.format(ctx, tmp, uid, gid); err != nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	if err := os.Rename(tmp, img); err != nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	ok = true
	syncDir(x.dir)
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

// Mount attaches the image to a free loop device and mounts it (nodev) at <dir>/mnt/<id>. A
// mounted volume is left as it is.
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
	img, mnt := x.image(id), x.mountpoint(id)
	if _, err := os.Stat(img); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("volume %s: %w", id, ErrNotFound)
		}
		return "", err
	}
	if _, mounted, err := mountAt(mnt); err != nil {
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
	if err := unix.Mount(dev, mnt, "xfs", unix.MS_NODEV, ""); err != nil {
		return "", fmt.Errorf("volume %s: mount %s at %s: %w", id, dev, mnt, err)
	}
	return mnt, nil
}

// Unmount unmounts the volume; the kernel then frees its loop device (autoclear). It fails with
// an error wrapping ErrBusy while a process or another mount namespace still uses the volume.
func (x *XFS) Unmount(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := x.locks.lock(id)
	defer unlock()
	return x.unmount(ctx, id)
}

func (x *XFS) unmount(ctx context.Context, id string) error {
	img, mnt := x.image(id), x.mountpoint(id)
	for tries := 0; ; tries++ {
		_, mounted, err := mountAt(mnt)
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
				return fmt.Errorf("volume %s: unmount %s: %w", id, mnt, ErrBusy)
			}
			if !errors.Is(err, unix.EINVAL) { // EINVAL: unmounted under us
				return fmt.Errorf("volume %s: unmount %s: %w", id, mnt, err)
			}
		}
	}
	if err := x.releaseLoops(ctx, id, img); err != nil {
		return err
	}
	if err := os.Remove(mnt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	return nil
}

// releaseLoops makes sure no loop device still holds img: autoclear normally frees it within the
// umount call, but a device bound by hand or by a crashed daemon without autoclear is detached
// here, and one kept alive by a mount in another namespace is reported as busy.
func (x *XFS) releaseLoops(ctx context.Context, id, img string) error {
	deadline := time.Now().Add(2 * time.Second)
	detached := false
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
					return fmt.Errorf("volume %s: %w", id, err)
				}
			}
			detached = true
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("volume %s: loop device %s still in use%s: %w",
				id, strings.Join(devs, ", "), holders(devs), ErrBusy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
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
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("volume %s: %w", id, err)
		}
	}
	syncDir(x.dir)
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
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	mnt := filepath.Join(x.dir, "mnt")
	for _, m := range ms {
		if id := filepath.Base(m.Target); filepath.Dir(m.Target) == mnt && validID(id) == nil {
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
// image (so a Grow interrupted after the truncate can be retried).
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
		if err := os.Truncate(img, size); err != nil {
			return Info{}, fmt.Errorf("volume %s: %w", id, err)
		}
	}

	m, mounted, err := mountAt(mnt)
	if err != nil {
		return Info{}, err
	}
	if !mounted {
		if _, err := x.mount(id); err != nil {
			return Info{}, err
		}
		if m, _, err = mountAt(mnt); err != nil {
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

// syncDir makes a rename or unlink in dir durable; failure only weakens crash safety.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// holders names processes whose mount namespace still mounts one of devs, for the busy error.
func holders(devs []string) string {
	seen := map[string]bool{}
	var out []string
	mountinfos, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	for _, p := range mountinfos {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		ns, _ := os.Readlink(filepath.Join(filepath.Dir(p), "ns", "mnt"))
		for _, dev := range devs {
			if !strings.Contains(string(b), " "+dev+" ") || seen[ns] {
				continue
			}
			seen[ns] = true
			comm, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "comm"))
			at := ""
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); strings.Contains(line, " "+dev+" ") && len(f) > 4 {
					at = " at " + f[4]
					break
				}
			}
			out = append(out, fmt.Sprintf("pid %s (%s)%s", filepath.Base(filepath.Dir(p)), strings.TrimSpace(string(comm)), at))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": mounted in the mount namespace of " + strings.Join(out, ", ")
}
