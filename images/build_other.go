//go:build !linux

package images

import (
	"context"
	"errors"
	"io"
)

var errNeedLinux = errors.New("building images needs Linux")

// Build builds image name; only on Linux.
func (s *Store) Build(ctx context.Context, name string, progress io.Writer) (Image, error) {
	return Image{}, errNeedLinux
}

// BuildWith builds image name; only on Linux.
func (s *Store) BuildWith(ctx context.Context, name string, progress io.Writer, opts BuildOptions) (Image, error) {
	return Image{}, errNeedLinux
}

// Prune removes unused rootfs generations of image name; only on Linux.
func (s *Store) Prune(ctx context.Context, name string) error { return errNeedLinux }

// Derive makes an image from another one; only on Linux.
func (s *Store) Derive(ctx context.Context, name string, opts DeriveOptions, progress io.Writer) (Image, error) {
	return Image{}, errNeedLinux
}

// Delete removes a built image; only on Linux.
func (s *Store) Delete(ctx context.Context, name string) error { return errNeedLinux }

// Import makes an image from a container image archive; only on Linux.
func (s *Store) Import(ctx context.Context, name, archive string, opts ImportOptions, progress io.Writer) (Image, error) {
	return Image{}, errNeedLinux
}

// Pull makes an image from a container image in a registry; only on Linux.
func (s *Store) Pull(ctx context.Context, name, ref string, opts PullOptions, progress io.Writer) (Image, error) {
	return Image{}, errNeedLinux
}
