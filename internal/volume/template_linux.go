//go:build linux

package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Templates: an image is made by cloning an empty filesystem formatted once, not by running
// mkfs for each. A clone in the reflink pool costs no data and about a millisecond, where
// mkfs.xfs took ~12 ms of a sandbox's create (the largest part of create → first exec after
// the container itself) and mkfs.ext4 a few. They live in <dir>/templates/<name>.img.

// template returns the path of the template name, an empty filesystem of sizeGiB that format
// makes the first time (under a temporary name, so a crash never leaves a half-made one).
func (x *XFS) template(ctx context.Context, name string, sizeGiB int, format func(ctx context.Context, img string) error) (string, error) {
	x.templates.Lock()
	defer x.templates.Unlock()
	dir := filepath.Join(x.dir, "templates")
	path := filepath.Join(dir, name+".img")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp := path + ".creating"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	err := makeImage(ctx, tmp, sizeGiB, format)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("template %s of %d GiB: %w", name, sizeGiB, err)
	}
	// A template is a cache: one a crash loses is made again, so its name need not last yet.
	_ = syncDir(dir)
	return path, nil
}

// makeImage makes a new sparse image of sizeGiB at path and has format make its filesystem; it
// leaves nothing at path when it fails.
func makeImage(ctx context.Context, path string, sizeGiB int, format func(ctx context.Context, img string) error) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(sizeGiB) << 30)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = format(ctx, path)
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// cloneTemplate makes img a copy of the template tmpl: a reflink clone where the pool can, else
// a sparse copy. It is not fsynced: a root layer is replaced at the next start anyway.
func (x *XFS) cloneTemplate(ctx context.Context, tmpl, img string) error {
	return x.copyTemplate(tmpl, img, func(out, in *os.File) error {
		_, _, err := x.fill(ctx, out, in, "", nil)
		return err
	})
}

// reflinkTemplate makes img a reflink clone of the template tmpl, on disk when it returns; it
// fails as cloneUnsupported says where the pool cannot clone (a workspace is then formatted:
// copying a template's metadata, its log included, is no faster than mkfs).
func (x *XFS) reflinkTemplate(tmpl, img string) error {
	if x.clone == nil {
		return unix.EOPNOTSUPP
	}
	return x.copyTemplate(tmpl, img, func(out, in *os.File) error {
		if err := x.clone(out, in); err != nil {
			return err
		}
		return out.Sync()
	})
}

func (x *XFS) copyTemplate(tmpl, img string, copy func(out, in *os.File) error) error {
	in, err := os.Open(tmpl)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(img)
	}
	return err
}
