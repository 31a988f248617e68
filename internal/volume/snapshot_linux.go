//go:build linux

package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/mountinfo"
)

// Snapshots are copies of volume images in <dir>/snapshots: a reflink clone where the pool
// supports it, else a sparse copy. A mounted volume is frozen (FIFREEZE) for the copy, so the
// image holds a clean, consistent filesystem; writers wait and nothing is stopped.

const (
	fiFreeze = 0xc0045877 // FIFREEZE, _IOWR('X', 119, int); x/sys/unix lacks it
	fiThaw   = 0xc0045878 // FITHAW, _IOWR('X', 120, int)

	// Extended attributes of a sealed snapshot image.
	xattrVolume    = "user.hiloop.volume"    // the id of the volume it was taken of
	xattrReflinked = "user.hiloop.reflinked" // "1" when it was made as a reflink clone

	copyChunk = 4 << 20
)

func (x *XFS) snapshotsDir() string { return filepath.Join(x.dir, "snapshots") }
func (x *XFS) snapshotImage(snapID string) string {
	return filepath.Join(x.snapshotsDir(), snapID+".img")
}

// Snapshot seals a copy of volume id as snapshot snapID (see Snapshotter). A snapshot of that id
// taken of the same volume is returned as it is; one taken of another volume is an error
// wrapping ErrExists. A sparse copy needs the image's allocated bytes free, else it fails with a
// *NoSpaceError, as does one that runs out of room half-way (nothing of it is left).
func (x *XFS) Snapshot(ctx context.Context, id, snapID string, progress Progress) (SnapshotInfo, error) {
	if err := validID(id); err != nil {
		return SnapshotInfo{}, err
	}
	if err := validSnapshotID(snapID); err != nil {
		return SnapshotInfo{}, err
	}
	defer x.locks.lock(id)()
	defer x.snapLocks.lock(snapID)()

	final := x.snapshotImage(snapID)
	if in, err := x.snapshotInfo(snapID); err == nil {
		if of := getxattr(final, xattrVolume); of != "" && of != id {
			return SnapshotInfo{}, fmt.Errorf("snapshot %s is of volume %s, not %s: %w", snapID, of, id, ErrExists)
		}
		return in, nil
	} else if !errors.Is(err, ErrNotFound) {
		return SnapshotInfo{}, err
	}
	img, mnt := x.image(id), x.mountpoint(id)
	if _, err := os.Stat(img); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return SnapshotInfo{}, fmt.Errorf("volume %s: %w", id, ErrNotFound)
		}
		return SnapshotInfo{}, err
	}
	mounted, err := mountinfo.Mounted(mnt)
	if err != nil {
		return SnapshotInfo{}, err
	}
	freeze := ""
	if mounted {
		freeze = mnt
	} else if devs, err := loopDevicesFor(img, true); err != nil {
		return SnapshotInfo{}, err
	} else if len(devs) > 0 {
		// Mounted only in another namespace: there is no mount point here to freeze it through.
		return SnapshotInfo{}, fmt.Errorf("volume %s: mounted elsewhere through %s, cannot freeze it: %w", id, devs[0], ErrBusy)
	}

	tmp := final + ".sealing"
	reflinked, err := x.copyImage(ctx, img, tmp, freeze, progress)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("volume %s: snapshot %s: %w", id, snapID, err)
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if freeze != "" {
		// A frozen XFS is consistent but its log is not clean: mounting the copy once, with the
		// volume already thawed, replays it, so the snapshot is a clean filesystem that tools
		// read as it is and that forks and restores mount without recovery.
		sealMnt := filepath.Join(x.dir, "mnt", "."+snapID+".sealing")
		if err := x.withImageMounted(ctx, id, tmp, sealMnt, nil); err != nil {
			return SnapshotInfo{}, fmt.Errorf("volume %s: snapshot %s: replay the log: %w", id, snapID, err)
		}
	}
	// The attributes are bookkeeping: a filesystem without user xattrs only loses Reflinked.
	_ = unix.Setxattr(tmp, xattrVolume, []byte(id), 0)
	if reflinked {
		_ = unix.Setxattr(tmp, xattrReflinked, []byte("1"), 0)
	}
	if err := os.Rename(tmp, final); err != nil {
		return SnapshotInfo{}, fmt.Errorf("volume %s: snapshot %s: %w", id, snapID, err)
	}
	ok = true
	if err := syncDir(x.snapshotsDir()); err != nil {
		return SnapshotInfo{}, fmt.Errorf("volume %s: snapshot %s: %w", id, snapID, err)
	}
	return x.snapshotInfo(snapID)
}

// SnapshotInfo describes a sealed snapshot; ErrNotFound if there is none.
func (x *XFS) SnapshotInfo(ctx context.Context, snapID string) (SnapshotInfo, error) {
	if err := validSnapshotID(snapID); err != nil {
		return SnapshotInfo{}, err
	}
	return x.snapshotInfo(snapID)
}

func (x *XFS) snapshotInfo(snapID string) (SnapshotInfo, error) {
	img := x.snapshotImage(snapID)
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", snapID, ErrNotFound)
		}
		return SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", snapID, err)
	}
	return SnapshotInfo{
		ID:             snapID,
		CapacityBytes:  st.Size,
		AllocatedBytes: st.Blocks * 512,
		Reflinked:      getxattr(img, xattrReflinked) == "1",
	}, nil
}

// DeleteSnapshot removes a snapshot, sealed or left half-made by a crash; a missing one is not
// an error. Blocks it shares with volumes or other snapshots stay theirs.
func (x *XFS) DeleteSnapshot(ctx context.Context, snapID string) error {
	if err := validSnapshotID(snapID); err != nil {
		return err
	}
	defer x.snapLocks.lock(snapID)()
	img := x.snapshotImage(snapID)
	for _, p := range []string{img, img + ".sealing"} {
		if err := removeImage(p); err != nil {
			return fmt.Errorf("snapshot %s: %w", snapID, err)
		}
	}
	if err := syncDir(x.snapshotsDir()); err != nil {
		return fmt.Errorf("snapshot %s: %w", snapID, err)
	}
	return nil
}

// removeImage unlinks the image file path (a missing one is not an error) and frees its blocks
// at once. XFS frees an unlinked file's blocks in the background and discards them (which
// gives the pool image's room back to the host, the bound of FreeBytes) only at its next log
// push, up to 30 s later; truncating the still-open file frees them now, and its fsync pushes
// the log.
func removeImage(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	defer f.Close()
	if err := os.Remove(path); err != nil {
		return err
	}
	if f.Truncate(0) == nil {
		_ = f.Sync()
	}
	return nil
}

// ListSnapshots returns the ids of every snapshot, sealed or being sealed (or cut short by a
// crash, for the caller to delete).
func (x *XFS) ListSnapshots(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(x.snapshotsDir())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok {
			id, ok = strings.CutSuffix(e.Name(), ".img.sealing")
		}
		if ok && !e.IsDir() && validID(id) == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// CreateFromSnapshot makes volume id, unmounted, as a copy of snapshot snapID: a reflink clone
// where the pool supports it. It fails with an error wrapping ErrExists if the volume exists,
// ErrNotFound if the snapshot does not, and a *NoSpaceError when the snapshot's capacity exceeds
// the free space (as Create does) or a sparse copy runs out of room.
func (x *XFS) CreateFromSnapshot(ctx context.Context, id, snapID string, progress Progress) (Info, error) {
	if err := validID(id); err != nil {
		return Info{}, err
	}
	if err := validSnapshotID(snapID); err != nil {
		return Info{}, err
	}
	defer x.locks.lock(id)()
	defer x.snapLocks.lock(snapID)()

	snap, err := x.snapshotInfo(snapID)
	if err != nil {
		return Info{}, err
	}
	img := x.image(id)
	if _, err := os.Stat(img); err == nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, ErrExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Info{}, err
	}
	if err := x.checkFree(snap.CapacityBytes); err != nil {
		return Info{}, fmt.Errorf("volume %s from snapshot %s: %w", id, snapID, err)
	}
	tmp := img + ".creating"
	if _, err := x.copyImage(ctx, x.snapshotImage(snapID), tmp, "", progress); err != nil {
		return Info{}, fmt.Errorf("volume %s from snapshot %s: %w", id, snapID, err)
	}
	return x.publish(id, tmp)
}

// Restore replaces the content of the unmounted volume id with snapshot snapID's (see
// Snapshotter). The copy is made beside the image, grown to the volume's capacity when the
// volume grew since the snapshot, and renamed over it: a failure leaves the volume as it was.
// A mounted volume is an error wrapping ErrBusy.
func (x *XFS) Restore(ctx context.Context, id, snapID string, progress Progress) (Info, error) {
	if err := validID(id); err != nil {
		return Info{}, err
	}
	if err := validSnapshotID(snapID); err != nil {
		return Info{}, err
	}
	if x.xfsGrowfs == "" {
		return Info{}, fmt.Errorf("volume %s: xfs_growfs not found, install xfsprogs: %w", id, ErrUnsupported)
	}
	defer x.locks.lock(id)()
	defer x.snapLocks.lock(snapID)()

	img, mnt := x.image(id), x.mountpoint(id)
	vol, err := x.info(id)
	if err != nil {
		return Info{}, err
	}
	snap, err := x.snapshotInfo(snapID)
	if err != nil {
		return Info{}, err
	}
	if mounted, err := mountinfo.Mounted(mnt); err != nil {
		return Info{}, err
	} else if mounted {
		return Info{}, fmt.Errorf("volume %s is mounted: unmount it to restore it: %w", id, ErrBusy)
	}
	if devs, err := loopDevicesFor(img, true); err != nil {
		return Info{}, err
	} else if len(devs) > 0 {
		return Info{}, fmt.Errorf("volume %s is still in use through %s%s: %w", id, devs[0], holders(devs), ErrBusy)
	}
	// A snapshot of a larger volume grows this one: XFS cannot shrink.
	capacity := max(vol.CapacityBytes, snap.CapacityBytes)
	if growth := snap.CapacityBytes - vol.CapacityBytes; growth > 0 {
		if err := x.checkFree(growth); err != nil {
			return Info{}, fmt.Errorf("volume %s: restore snapshot %s: %w", id, snapID, err)
		}
	}

	tmp := img + ".creating"
	if _, err := x.copyImage(ctx, x.snapshotImage(snapID), tmp, "", progress); err != nil {
		return Info{}, fmt.Errorf("volume %s: restore snapshot %s: %w", id, snapID, err)
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if capacity > snap.CapacityBytes {
		if err := x.growImage(ctx, id, tmp, capacity); err != nil {
			return Info{}, fmt.Errorf("volume %s: restore snapshot %s: %w", id, snapID, err)
		}
	}
	if err := os.Rename(tmp, img); err != nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	ok = true
	if err := syncDir(x.dir); err != nil {
		return Info{}, fmt.Errorf("volume %s: restore snapshot %s: %w", id, snapID, err)
	}
	return Info{ID: id, CapacityBytes: capacity, Resizable: true}, nil
}

// growImage grows the unmounted filesystem in img, a copy being made for volume id, to size:
// truncate, then xfs_growfs through a mount at the volume's (free) mount point.
func (x *XFS) growImage(ctx context.Context, id, img string, size int64) error {
	if err := os.Truncate(img, size); err != nil {
		return err
	}
	mnt := x.mountpoint(id)
	return x.withImageMounted(ctx, id, img, mnt, func(dev string) error { return x.growfs(ctx, dev, mnt) })
}

// withImageMounted mounts img, a copy being made for volume id, at mnt, runs f (if any) with its
// loop device, unmounts it and fsyncs img: the loop device wrote through the page cache, and a
// rename that follows must not outrun it.
func (x *XFS) withImageMounted(ctx context.Context, id, img, mnt string, f func(dev string) error) error {
	if _, err := x.mountImage(id, img, mnt); err != nil {
		return err
	}
	m, _, err := mountinfo.At(mnt)
	if err == nil && f != nil {
		err = f(m.Source)
	}
	if uerr := x.unmountImage(context.WithoutCancel(ctx), id, img, mnt); err == nil {
		err = uerr
	}
	if err != nil {
		return err
	}
	file, err := os.Open(img)
	if err != nil {
		return err
	}
	defer file.Close()
	return file.Sync()
}

// cleanSealMounts unmounts the copies a daemon that died mid-seal left mounted under mnt, and
// removes their mount points, also those it died between creating and mounting, or between
// unmounting and removing (the copies' files are removed through ListSnapshots and
// DeleteSnapshot).
func cleanSealMounts(mnt string) {
	isSeal := func(name string) bool { return strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".sealing") }
	under, _ := mountinfo.Under(mnt)
	for _, t := range under {
		if filepath.Dir(t) == mnt && isSeal(filepath.Base(t)) {
			_ = unix.Unmount(t, unix.MNT_DETACH)
		}
	}
	entries, _ := os.ReadDir(mnt)
	for _, e := range entries {
		if e.IsDir() && isSeal(e.Name()) {
			// rmdir: a mount point still mounted (the unmount failed) or not empty stays.
			_ = unix.Rmdir(filepath.Join(mnt, e.Name()))
		}
	}
}

// copyImage makes tmp, a new file, a copy of src and fsyncs it: a reflink clone when the pool
// supports it, else a sparse copy that reports progress and honours ctx. freeze, when not
// empty, is the mount point of src's filesystem, frozen for the duration of the copy. It
// returns whether the copy is a clone. On any error tmp is removed; running out of room is a
// *NoSpaceError.
func (x *XFS) copyImage(ctx context.Context, src, tmp, freeze string, progress Progress) (reflinked bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	in, err := os.Open(src)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, ErrNotFound
		}
		return false, err
	}
	defer in.Close()
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	var need int64
	ok := false
	defer func() { // also on a panic: never a half copy left behind
		if ok {
			return
		}
		out.Close()
		os.Remove(tmp)
		if errors.Is(err, unix.ENOSPC) {
			free, _ := x.FreeBytes()
			err = fmt.Errorf("%w (%w)", &NoSpaceError{NeedBytes: need, FreeBytes: free}, err)
		}
	}()
	reflinked, need, err = x.fill(ctx, out, in, freeze, progress)
	if err != nil {
		return false, err
	}
	if err := out.Sync(); err != nil {
		return false, err
	}
	if err := out.Close(); err != nil {
		return false, err
	}
	ok = true
	return reflinked, nil
}

// fill copies in to out with the filesystem at freeze (if any) frozen, and returns whether it
// cloned and the room a copy needs (the allocated bytes of in).
func (x *XFS) fill(ctx context.Context, out, in *os.File, freeze string, progress Progress) (reflinked bool, need int64, err error) {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	if freeze != "" {
		thaw, err := freezeFS(freeze)
		if err != nil {
			return false, 0, err
		}
		// Deferred: the filesystem is thawed whatever happens here, a panic included.
		defer func() {
			if terr := thaw(); terr != nil && err == nil {
				err = terr
			}
		}()
	}
	// Only now, frozen, is in's size and allocation final.
	var st unix.Stat_t
	if err := unix.Fstat(int(in.Fd()), &st); err != nil {
		return false, 0, err
	}
	need = st.Blocks * 512
	if x.clone != nil {
		err := x.clone(out, in)
		if err == nil {
			progress(need, need)
			return true, need, nil
		}
		if !cloneUnsupported(err) {
			return false, need, fmt.Errorf("clone: %w", err)
		}
	}
	if err := x.checkFree(need); err != nil {
		return false, need, err
	}
	return false, need, sparseCopy(ctx, out, in, st.Size, progress)
}

// freezeFS freezes the filesystem mounted at dir and returns the function that thaws it.
func freezeFS(dir string) (thaw func() error, err error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("freeze %s: %w", dir, err)
	}
	if err := unix.IoctlSetInt(fd, fiFreeze, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("freeze %s: %w", dir, err)
	}
	return func() error {
		defer unix.Close(fd)
		if err := unix.IoctlSetInt(fd, fiThaw, 0); err != nil {
			return fmt.Errorf("thaw %s: %w", dir, err)
		}
		return nil
	}, nil
}

// thawAll thaws every volume mounted under mnt: a daemon that died mid-snapshot leaves its
// volume frozen, and its writers waiting for ever. Thawing one that is not frozen is a no-op.
func thawAll(mnt string) {
	under, _ := mountinfo.Under(mnt)
	for _, t := range under {
		if filepath.Dir(t) != mnt || validID(filepath.Base(t)) != nil {
			continue
		}
		if fd, err := unix.Open(t, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.IoctlSetInt(fd, fiThaw, 0)
			unix.Close(fd)
		}
	}
}

// sparseCopy copies the data of in (size bytes) to out, leaving holes where in has holes or
// zeros. progress gets the bytes of data copied out of the total.
func sparseCopy(ctx context.Context, out, in *os.File, size int64, progress Progress) error {
	// The data map first, for the total: the source is frozen or unmounted, so it holds still.
	type extent struct{ start, end int64 }
	var extents []extent
	var total int64
	fd := int(in.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // no data after off
			break
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		extents = append(extents, extent{data, hole})
		total += hole - data
		off = hole
	}
	progress(0, total)
	buf := make([]byte, copyChunk)
	zero := make([]byte, copyChunk)
	var done, reported int64
	for _, e := range extents {
		for off := e.start; off < e.end; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := int(min(int64(len(buf)), e.end-off))
			n, err := in.ReadAt(buf[:n], off)
			if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
				return fmt.Errorf("read: %w", err)
			}
			if !bytes.Equal(buf[:n], zero[:n]) {
				if _, err := out.WriteAt(buf[:n], off); err != nil {
					return err
				}
			}
			off += int64(n)
			done += int64(n)
			if done-reported >= 16<<20 {
				progress(done, total)
				reported = done
			}
		}
	}
	// The size last: writes that extend the file get XFS's speculative preallocation, so the
	// copy is laid out in few extents.
	if err := out.Truncate(size); err != nil {
		return err
	}
	progress(done, total)
	return nil
}

// getxattr returns the value of an extended attribute of path, or "" if it has none.
func getxattr(path, name string) string {
	buf := make([]byte, 256)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}
