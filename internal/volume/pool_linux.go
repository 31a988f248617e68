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
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/mountinfo"
)

// The reflink pool: where the host filesystem cannot clone files (ext4), volumes and snapshots
// live in one XFS filesystem (reflink on) in a sparse image next to the driver's directory,
// loop-attached and mounted on it. The pool is as large as the host filesystem holding it, so
// its free space is bounded by the host's, which FreeBytes reports. It is made once, mounted
// again after a reboot, and never deleted by the driver.

const poolLabel = "hiloop-pool" // mkfs.xfs allows 12 characters

// openPool finds or makes the filesystem the volumes live in. Something mounted on dir is used
// as it is (the pool of an earlier run, or an operator's disk); a pool image is mounted; a
// directory whose filesystem clones files needs no pool. Otherwise a pool is made, unless dir
// already holds volumes that mounting a pool over it would hide: those keep their sparse copies.
func (x *XFS) openPool() error {
	img := x.dir + ".pool.img"
	m, mounted, err := mountinfo.At(x.dir)
	if err != nil {
		return err
	}
	if mounted {
		if isLoopOf(m.Source, img) {
			x.pool = img
			return ensureShared(x.dir, m)
		}
		return nil
	}
	if _, err := os.Stat(img); err == nil {
		return x.mountPool(img)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if ok, err := reflinkSupported(x.dir); err != nil || ok {
		return err
	}
	if busy, err := holdsVolumes(x.dir); err != nil || busy {
		return err
	}
	if err := x.makePool(img); err != nil {
		return err
	}
	return x.mountPool(img)
}

// holdsVolumes tells whether dir holds volume images or mounts a pool would cover. An empty
// shared mount point left by an earlier run is unmounted: the pool brings its own.
func holdsVolumes(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".img") {
			return true, nil
		}
	}
	snaps, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if len(snaps) > 0 {
		return true, nil
	}
	mnt := filepath.Join(dir, "mnt")
	under, err := mountinfo.Under(dir)
	if err != nil {
		return false, err
	}
	for _, t := range under {
		if t != mnt {
			return true, nil
		}
	}
	if len(under) > 0 {
		if err := unix.Unmount(mnt, 0); err != nil {
			return false, fmt.Errorf("unmount %s: %w", mnt, err)
		}
	}
	return false, nil
}

// makePool formats a sparse pool image as large as the filesystem that holds it, under a
// temporary name so a crash never leaves a half-made pool to mount.
func (x *XFS) makePool(img string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(img), &st); err != nil {
		return fmt.Errorf("statfs %s: %w", filepath.Dir(img), err)
	}
	size := int64(st.Blocks) * st.Bsize
	tmp := img + ".creating"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pool: size image: %w", err)
	}
	// -K: the image is all holes, nothing to discard.
	out, err := exec.Command(x.mkfs, "-q", "-K", "-m", "reflink=1", "-L", poolLabel, tmp).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pool: mkfs.xfs: %w: %s", err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, img); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	ok = true
	// A pool whose name a crash undid would be made afresh, empty, at the next start, with
	// every volume made in this one inside the lost image.
	if err := syncDir(filepath.Dir(img)); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	return nil
}

// mountPool mounts the pool image on dir as a shared mount of its own (see makeShared: the
// volumes mounted under it propagate their unmounts, and so does the pool).
func (x *XFS) mountPool(img string) error {
	var dev string
	if devs, err := loopDevicesFor(img, true); err != nil {
		return err
	} else if len(devs) > 0 {
		dev = devs[0] // still mounted in another namespace: share its superblock
	} else {
		var fd int
		dev, fd, err = loopAttach(img)
		if err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		defer unix.Close(fd)
	}
	// discard: space freed in the pool is punched out of its image, back to the host.
	if err := unix.Mount(dev, x.dir, "xfs", unix.MS_NODEV|unix.MS_NOSUID, "discard"); err != nil {
		return fmt.Errorf("pool: mount %s (%s) on %s: %w", img, dev, x.dir, err)
	}
	x.pool = img
	if err := os.Chmod(x.dir, 0o700); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	m, _, err := mountinfo.At(x.dir)
	if err != nil {
		return err
	}
	return ensureShared(x.dir, m)
}

// ensureShared makes the mount m at dir shared, in a peer group of its own if it is not
// shared already.
func ensureShared(dir string, m mountinfo.Info) error {
	if strings.Contains(m.Optional, "shared:") {
		return nil
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// closePool unmounts the pool and makes sure its loop device is gone.
func (x *XFS) closePool() error {
	m, mounted, err := mountinfo.At(x.dir)
	if err != nil {
		return err
	}
	if mounted && isLoopOf(m.Source, x.pool) {
		if err := unix.Unmount(x.dir, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("xfs volume driver: unmount the pool at %s: %w", x.dir, ErrBusy)
			}
			return fmt.Errorf("xfs volume driver: unmount the pool at %s: %w", x.dir, err)
		}
	}
	return releaseLoops(context.Background(), "xfs volume pool", x.pool)
}

// isLoopOf tells whether dev is a loop device bound to the file img.
func isLoopOf(dev, img string) bool {
	file, _, bound := loopBackingFile(dev)
	return bound && file == img
}

// Pool returns the path of the pool image mounted on Dir, or "" when the volumes live on Dir's
// own filesystem.
func (x *XFS) Pool() string { return x.pool }

// Reflink tells whether snapshots and forks are reflink copies (near O(1)) rather than sparse
// copies (proportional to the data).
func (x *XFS) Reflink() bool { return x.clone != nil }

// FreeBytes is the room left for volume data: the free space of the pool, bounded by that of
// the host filesystem under a (sparse) pool image.
func (x *XFS) FreeBytes() (int64, error) {
	free, err := statfsFree(x.dir)
	if err != nil || x.pool == "" {
		return free, err
	}
	host, err := statfsFree(filepath.Dir(x.pool))
	if err != nil {
		return 0, err
	}
	return min(free, host), nil
}

// HeldBytes is the room the driver's files take on the host filesystem: the allocated blocks
// of the pool image, or, without a pool, those of the images and snapshots in Dir (where a
// block two clones share counts twice).
func (x *XFS) HeldBytes() (int64, error) {
	files := []string{x.pool}
	if x.pool == "" {
		imgs, _ := filepath.Glob(filepath.Join(x.dir, "*.img"))
		snaps, _ := filepath.Glob(filepath.Join(x.snapshotsDir(), "*.img"))
		files = append(imgs, snaps...)
	}
	var held int64
	for _, f := range files {
		var st unix.Stat_t
		if err := unix.Stat(f, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // deleted since the listing
			}
			return 0, fmt.Errorf("stat %s: %w", f, err)
		}
		held += st.Blocks * 512
	}
	return held, nil
}

// checkFree returns a *NoSpaceError when need bytes exceed FreeBytes.
func (x *XFS) checkFree(need int64) error {
	free, err := x.FreeBytes()
	if err != nil {
		return err
	}
	if need > free {
		return &NoSpaceError{NeedBytes: need, FreeBytes: free}
	}
	return nil
}

func statfsFree(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// fileClone makes dst share all of src's blocks.
func fileClone(dst, src *os.File) error {
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
}

// cloneUnsupported tells whether a FICLONE error means the filesystem cannot clone (so a copy
// is the way), rather than a failure such as ENOSPC.
func cloneUnsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.ENOSYS)
}

// reflinkSupported tells whether dir's filesystem clones files, by cloning a small one.
func reflinkSupported(dir string) (bool, error) {
	src, err := os.CreateTemp(dir, ".reflink-probe-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(src.Name())
	defer src.Close()
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return false, err
	}
	dst, err := os.CreateTemp(dir, ".reflink-probe-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	if err := fileClone(dst, src); err != nil {
		if cloneUnsupported(err) {
			return false, nil
		}
		return false, fmt.Errorf("reflink probe in %s: %w", dir, err)
	}
	return true, nil
}
