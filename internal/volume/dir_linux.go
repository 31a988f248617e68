//go:build linux

package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/mountinfo"
)

// Dir is the fixed-geometry driver for hosts without loop devices: every volume is a plain
// directory <dir>/<id> sharing the filesystem that holds dir, so its capacity is that
// filesystem's and cannot be chosen or grown.
type Dir struct {
	dir   string
	locks idLocks
}

var _ Driver = (*Dir)(nil)

// NewDir returns the dir driver keeping its volumes under dir, creating dir if needed.
func NewDir(dir string) (*Dir, error) {
	if dir == "" {
		return nil, errors.New("dir volume driver: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// Root's alone, as the xfs driver's (see NewXFS).
	err = os.MkdirAll(abs, 0o700)
	if err == nil {
		err = os.Chmod(abs, 0o700)
	}
	if err != nil {
		return nil, fmt.Errorf("dir volume driver: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("dir volume driver: %w", err)
	}
	return &Dir{dir: resolved}, nil
}

// Name returns "dir".
func (d *Dir) Name() string { return "dir" }

// Resizable is false: a directory has the host filesystem's fixed size.
func (d *Dir) Resizable() bool { return false }

func (d *Dir) path(id string) string { return filepath.Join(d.dir, id) }

// Create makes the volume's directory owned by uid:gid with mode 0755. A size other than 0 fails
// with an error wrapping ErrUnsupported.
func (d *Dir) Create(ctx context.Context, id string, sizeGiB int, uid, gid int) (Info, error) {
	if err := validID(id); err != nil {
		return Info{}, err
	}
	if sizeGiB != 0 {
		return Info{}, fmt.Errorf("volume %s: the dir driver cannot set a size (%d GiB): %w", id, sizeGiB, ErrUnsupported)
	}
	if uid < 0 || gid < 0 {
		return Info{}, fmt.Errorf("volume %s: invalid owner %d:%d", id, uid, gid)
	}
	unlock := d.locks.lock(id)
	defer unlock()
	p := d.path(id)
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	// Chown every time: a crash between mkdir and chown must not leave a root-owned workspace.
	if err := os.Lchown(p, uid, gid); err != nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		return Info{}, fmt.Errorf("volume %s: %w", id, err)
	}
	return d.info(id)
}

// Mount returns the volume's directory; there is nothing to mount.
func (d *Dir) Mount(ctx context.Context, id string) (string, error) {
	if _, err := d.Info(ctx, id); err != nil {
		return "", err
	}
	return d.path(id), nil
}

// Unmount does nothing.
func (d *Dir) Unmount(ctx context.Context, id string) error { return validID(id) }

// Delete removes the volume's directory and everything in it. It refuses while something is
// mounted inside it, since removing would reach into that mount.
func (d *Dir) Delete(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := d.locks.lock(id)
	defer unlock()
	p := d.path(id)
	if ms, err := mountinfo.Under(p); err != nil {
		return err
	} else if len(ms) > 0 {
		return fmt.Errorf("volume %s: %s is mounted: %w", id, ms[0], ErrBusy)
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	return nil
}

// Info reports the capacity of the filesystem holding the volumes; Resizable is false.
func (d *Dir) Info(ctx context.Context, id string) (Info, error) {
	if err := validID(id); err != nil {
		return Info{}, err
	}
	return d.info(id)
}

func (d *Dir) info(id string) (Info, error) {
	st, err := os.Lstat(d.path(id))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Info{}, fmt.Errorf("volume %s: %w", id, ErrNotFound)
		}
		return Info{}, err
	}
	if !st.IsDir() {
		return Info{}, fmt.Errorf("volume %s: %s is not a directory", id, d.path(id))
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(d.dir, &sfs); err != nil {
		return Info{}, fmt.Errorf("volume %s: statfs: %w", id, err)
	}
	return Info{ID: id, CapacityBytes: int64(sfs.Blocks) * int64(sfs.Bsize), Resizable: false}, nil
}

// List returns the ids of every volume directory.
func (d *Dir) List(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && validID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	slices.Sort(ids)
	return ids, nil
}
