//go:build linux

package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/mountinfo"
)

// Layers keeps the writable root of every running sandbox (the overlay's upper layer) on a
// filesystem of its own, so that what a sandbox writes outside /workspace is bounded in bytes
// and inodes and costs the host one file, not one inode per file written. The filesystems are
// ext4 images (no journal: a layer never outlives a crash) in a pool like the volumes' (an XFS
// pool image of its own where the host filesystem cannot clone files), in this layout under the
// directory:
//
//	<dir>/<id>.img                the sandbox's root layer, while it runs
//	<dir>/mnt/<id>                its mount point, the runtime's layer directory
//	<dir>/templates/<gib>.img     an empty filesystem of that size, formatted once
//
// A start clones the template of the sandbox's size (a reflink: no mkfs and no data copied)
// and mounts it; a stop unmounts and deletes it, so a stopped sandbox holds no room, and the
// next start never inherits a full filesystem still being deleted.
//
// Why ext4 and images rather than project quotas in one shared filesystem: the kernels here
// are built without XFS quota (and ext4's needs QFMT_V2, also missing), and an empty ext4
// without a journal mounts in ~2 ms where an XFS takes ~6 ms (measured on a clone of each).
type Layers struct {
	x    *XFS
	mkfs string // mkfs.ext4
}

// LayerInodesPerGiB is the number of inodes a root layer has per GiB of its size (one per 16
// KiB, mke2fs's default ratio): about 655,000 at 10 GiB, more than any image installs, and a
// bound on a sandbox creating empty files by the million.
const LayerInodesPerGiB = 1 << 16

// NewLayers returns the root layers kept under dir, setting up or mounting their pool as NewXFS
// does for volumes; it fails with an error wrapping ErrUnsupported without loop devices or
// mkfs.xfs.
func NewLayers(dir string) (*Layers, error) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return nil, fmt.Errorf("root layers: mkfs.ext4 not found, install e2fsprogs: %w", ErrUnsupported)
	}
	x, err := NewXFS(dir)
	if err != nil {
		return nil, fmt.Errorf("root layers: %w", err)
	}
	// noinit_itable: the inode tables of a layer are never zeroed behind its back (a
	// throwaway filesystem needs no fsck safety net, and the writes would cost the host).
	x.fsType, x.fsData = "ext4", "noinit_itable"
	// Unlike a workspace, a root layer is reached by the sandbox's own root, an unprivileged
	// host id, as it pivots into its root filesystem: the pool and mnt let every id pass (not
	// list), and the runtime gives each layer's root to the sandbox alone (0710). The images
	// and templates beside them stay root's (0600, 0700).
	for _, d := range []string{x.dir, filepath.Join(x.dir, "mnt")} {
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("root layers: %w", err)
		}
	}
	return &Layers{x: x, mkfs: mkfs}, nil
}

// Dir returns the directory holding the layers (absolute, symlinks resolved).
func (l *Layers) Dir() string { return l.x.dir }

// Fresh gives sandbox id an empty root layer filesystem of sizeGiB and returns its mount point,
// replacing (and deleting) any layer it still had. Its root is owned by root, mode 0755.
func (l *Layers) Fresh(ctx context.Context, id string, sizeGiB int) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	if sizeGiB <= 0 {
		return "", fmt.Errorf("root layer %s: invalid size %d GiB", id, sizeGiB)
	}
	tmpl, err := l.template(ctx, sizeGiB)
	if err != nil {
		return "", fmt.Errorf("root layer %s: %w", id, err)
	}
	unlock := l.x.locks.lock(id)
	defer unlock()
	if err := l.drop(ctx, id); err != nil {
		return "", err
	}
	img := l.x.image(id)
	if err := l.x.cloneTemplate(ctx, tmpl, img); err != nil {
		return "", fmt.Errorf("root layer %s: %w", id, err)
	}
	mnt, err := l.x.mount(id)
	if err != nil {
		_ = removeImage(img)
		return "", fmt.Errorf("root layer %s: %w", id, err)
	}
	return mnt, nil
}

// template returns the empty filesystem of sizeGiB that layers are cloned from, formatting it
// the first time.
func (l *Layers) template(ctx context.Context, sizeGiB int) (string, error) {
	return l.x.template(ctx, strconv.Itoa(sizeGiB), sizeGiB, func(ctx context.Context, img string) error {
		// No journal, no reserve for root (root in the sandbox is whom it would serve), the
		// inode tables left for the kernel to initialise as it uses them.
		cmd := exec.CommandContext(ctx, l.mkfs, "-q", "-F", "-O", "^has_journal", "-m", "0",
			"-N", strconv.Itoa(sizeGiB*LayerInodesPerGiB), "-E", "lazy_itable_init=1,nodiscard", img)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out))
		}
		return nil
	})
}

// Drop unmounts and deletes sandbox id's root layer, giving its room back; a missing layer is
// not an error. It fails with an error wrapping ErrBusy while something still uses the layer
// (the runtime unmounts the overlay on it when it stops the sandbox).
func (l *Layers) Drop(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := l.x.locks.lock(id)
	defer unlock()
	return l.drop(ctx, id)
}

func (l *Layers) drop(ctx context.Context, id string) error {
	err := l.x.unmount(ctx, id)
	if errors.Is(err, ErrBusy) {
		// Only then is the mount table read: it has three lines per sandbox on the host, and
		// every start drops its sandbox's layer first.
		if err := unmountInside(l.x.mountpoint(id)); err != nil {
			return fmt.Errorf("root layer %s: %w", id, err)
		}
		err = l.x.unmount(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("root layer %s: %w", id, err)
	}
	if err := removeImage(l.x.image(id)); err != nil {
		return fmt.Errorf("root layer %s: %w", id, err)
	}
	return nil
}

// List returns the ids of the sandboxes that have a root layer, mounted or not.
func (l *Layers) List(ctx context.Context) ([]string, error) { return l.x.List(ctx) }

// FreeBytes is the room left for root layers: see XFS.FreeBytes.
func (l *Layers) FreeBytes() (int64, error) { return l.x.FreeBytes() }

// HeldBytes is the room the layers take on the host: see XFS.HeldBytes.
func (l *Layers) HeldBytes() (int64, error) { return l.x.HeldBytes() }

// Close releases the pool's mounts once no layer is mounted (see XFS.Close): a daemon that
// leaves sandboxes running keeps them, with an error wrapping ErrBusy.
func (l *Layers) Close() error { return l.x.Close() }

// unmountInside unmounts what is mounted below mnt, deepest first, detaching lazily what
// something still holds. The runtime mounts a sandbox's overlay, and the image under it, inside
// the layer; a daemon killed between those mounts and their unmounts leaves them there, and the
// layer's own unmount would then fail as busy at every later start, stop and delete.
func unmountInside(mnt string) error {
	points, err := mountinfo.Under(mnt) // deepest first
	if err != nil {
		return err
	}
	for _, p := range points {
		if p == mnt {
			continue
		}
		err := unix.Unmount(p, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}
