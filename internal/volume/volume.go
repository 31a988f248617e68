// Package volume owns workspace volumes: their image files, loop devices and mounts.
//
// A volume is identified by the sandbox id it belongs to. The package must not touch the store,
// containers or cgroups; the sandbox manager decides when a volume is created, mounted and deleted.
package volume

import (
	"context"
	"errors"
	"fmt"
	"regexp"
)

// DefaultSizeGiB is the capacity of a resizable volume created with sizeGiB 0.
const DefaultSizeGiB = 10

// ErrUnsupported is returned for an operation the driver cannot do (e.g. resize a fixed volume).
var ErrUnsupported = errors.New("unsupported by this volume driver")

// ErrNotFound is returned for a volume that does not exist.
var ErrNotFound = errors.New("volume not found")

// ErrExists is returned by Create for a volume that exists with another size.
var ErrExists = errors.New("volume exists with another size")

// ErrBusy is returned when a volume cannot be unmounted because something still uses it.
var ErrBusy = errors.New("volume busy")

// Info describes a volume.
type Info struct {
	ID string
	// CapacityBytes is the size of the filesystem as seen inside the sandbox.
	CapacityBytes int64
	// Resizable tells whether the capacity can be chosen and grown.
	Resizable bool
}

// Driver creates and mounts workspace volumes. Every method is idempotent: creating an existing
// volume with the same size, mounting a mounted one, or deleting a missing one succeeds.
type Driver interface {
	// Name is the driver's name as given to sandboxd --volume-driver.
	Name() string
	// Resizable tells whether Create takes a size and volumes can grow.
	Resizable() bool
	// Create makes a new empty volume of sizeGiB (0 means the driver's default or fixed size) whose
	// root is owned by uid:gid.
	Create(ctx context.Context, id string, sizeGiB int, uid, gid int) (Info, error)
	// Mount mounts the volume and returns the host directory holding its root.
	Mount(ctx context.Context, id string) (string, error)
	// Unmount unmounts the volume and releases any loop device.
	Unmount(ctx context.Context, id string) error
	// Delete unmounts and removes the volume and everything it holds.
	Delete(ctx context.Context, id string) error
	// Info describes an existing volume.
	Info(ctx context.Context, id string) (Info, error)
	// List returns the ids of every volume the driver holds (for reconciling leftovers).
	List(ctx context.Context) ([]string, error)
}

// Grower is implemented by drivers whose volumes grow online (Info.Resizable is true).
type Grower interface {
	// Grow enlarges the volume to sizeGiB, mounted or not; a smaller size than the current one is
	// an error (growth is one-way) and the same size is a no-op.
	Grow(ctx context.Context, id string, sizeGiB int) (Info, error)
}

// idRE keeps ids usable as file names with no room for path tricks or suffix collisions.
var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

func validID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("invalid volume id %q: use 1-128 characters of A-Z, a-z, 0-9, '_' and '-'", id)
	}
	return nil
}

func validSnapshotID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("invalid snapshot id %q: use 1-128 characters of A-Z, a-z, 0-9, '_' and '-'", id)
	}
	return nil
}
