//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// A sandbox runs in its own user namespace: ids 0..IDRangeSize-1 inside are host ids
// Spec.IDBase.. outside, so root inside is an unprivileged host id and the per-user kernel
// limits (inotify instances, user namespaces, pending signals, ...) count per sandbox. The
// image, a host directory owned by host root, is shown to the overlay through an idmapped
// mount (host id N appears as IDBase+N), so the unshifted image serves every sandbox; the
// workspace is idmapped the same way by libcontainer, so what is on disk stays unshifted and
// a workspace, a snapshot or a fork works in any sandbox whatever its range.

// idMapping is the one mapping of a sandbox's user namespace, for uids and gids alike.
func idMapping(base uint32) []syscall.SysProcIDMap {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: IDRangeSize}}
}

// checkIDBase refuses a range that would map a sandbox id onto a host account (below
// IDRangeSize) or run past the ids the kernel accepts.
func checkIDBase(base uint32) error {
	if base < IDRangeSize || uint64(base)+IDRangeSize > 1<<32-1 {
		return fmt.Errorf("runtime: IDBase %d: want a range of %d ids from at least %d and below 2^32-1", base, IDRangeSize, IDRangeSize)
	}
	return nil
}

// newUserNS returns a user namespace with the sandbox's mapping, to idmap mounts with. The
// namespace is held by the returned file alone: the process made to create it never runs a
// single instruction of its own (ptrace stops it at its exec) and is killed before this
// returns. setgroups stays allowed, as in the sandbox's own namespace.
func newUserNS(base uint32) (*os.File, error) {
	m := idMapping(base)
	proc, err := os.StartProcess("/proc/self/exe", []string{"sandboxd-userns"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{
		Cloneflags:                 unix.CLONE_NEWUSER,
		UidMappings:                m,
		GidMappings:                m,
		GidMappingsEnableSetgroups: true,
		Ptrace:                     true,
	}})
	if err != nil {
		return nil, fmt.Errorf("create a user namespace for ids %d+%d: %w", base, IDRangeSize, err)
	}
	defer func() {
		_ = proc.Kill()
		_, _ = proc.Wait()
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", proc.Pid))
	if err != nil {
		return nil, fmt.Errorf("open the user namespace for ids %d+%d: %w", base, IDRangeSize, err)
	}
	return f, nil
}

// mountIDMapped mounts a read-only copy of the directory src at target (which must exist),
// with host ids shifted by userns's mapping.
func mountIDMapped(src, target string, userns *os.File) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns.Fd()),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		if errors.Is(err, unix.EINVAL) {
			err = errNoIDMap
		}
		return fmt.Errorf("idmap %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount idmapped %s on %s: %w", src, target, err)
	}
	return nil
}

// prepareLayerDir makes layerDir reachable by the sandbox's root and nobody else but host root:
// libcontainer sets the root filesystem up as root of the sandbox's user namespace, an
// unprivileged host id that must search every directory on the way to layerDir/merged. The
// directory itself is root's, searchable by the sandbox's group only.
func prepareLayerDir(layerDir string, base uint32) error {
	if err := os.MkdirAll(layerDir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(layerDir, 0, int(base)); err != nil {
		return err
	}
	return os.Chmod(layerDir, 0o710)
}

// CheckSearchable reports an error unless an unprivileged host id can pass dir and every
// directory above it: a sandbox's root, which is one, passes them on its way to its root
// filesystem in a layer dir below dir (see prepareLayerDir). They are checked, not changed.
func CheckSearchable(dir string) error {
	for dir = filepath.Clean(dir); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (mode %04o) is not searchable by other users: a sandbox's root, an unprivileged host id, must pass it to reach its root filesystem; make it 0711", dir, fi.Mode().Perm())
		}
		if filepath.Dir(dir) == dir {
			return nil
		}
	}
}

// errNoIDMap says the kernel or the image's filesystem cannot idmap the image.
var errNoIDMap = errors.New("the image's filesystem cannot be idmapped on this kernel (Linux 5.19 or later with ext4, xfs, btrfs or tmpfs is needed)")
