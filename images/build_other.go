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
