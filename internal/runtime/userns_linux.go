//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
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

// checkIDBase refuses a range that would map a sandbox id onto a host account (below
// IDRangeSize) or run past the ids the kernel accepts.
func checkIDBase(base uint32) error {
	if base < IDRangeSize || uint64(base)+IDRangeSize > 1<<32-1 {
		return fmt.Errorf("runtime: IDBase %d: want a range of %d ids from at least %d and below 2^32-1", base, IDRangeSize, IDRangeSize)
	}
	return nil
}

// userNS is a sandbox's user namespace, made before the sandbox starts: its image is idmapped
// with it, and libcontainer puts the sandbox in it (by Path) rather than making one. Close it
// once the sandbox runs; the sandbox's processes keep the namespace alive.
type userNS struct {
	// File is the namespace, for MOUNT_ATTR_IDMAP.
	File *os.File
	// Path is /proc/PID/ns/user of the process holding it until Close.
	Path    string
	release chan struct{}
	done    chan struct{}
}

// newUserNS makes a user namespace that maps 0..IDRangeSize-1 to the host ids from base and is
// owned by host uid base. The owner is what matters for the per-user kernel limits: the kernel
// charges what a sandbox's processes take (inotify instances and watches, user namespaces, ...)
// to their own uid inside and to the owner of the namespace in the host's, and it is the host's
// limit that binds. Made by host root, every sandbox's namespace would share root's 128
// inotify instances with host root and every other sandbox; owned by base, each sandbox has
// its own.
//
// The namespace is made by a process cloned, with CLONE_NEWUSER, from a thread whose effective
// uid alone is base for the clone; the thread has its root back (its real and saved uids stay
// 0) to write the mapping. The process never runs an instruction of its own: ptrace stops it
// at its exec (of this binary, reached through /proc/self/exe, so no directory on the way must
// be open to uid base), and it is killed at Close, by that same thread, its tracer.
func newUserNS(base uint32) (*userNS, error) {
	u := &userNS{release: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		defer close(u.done)
		// Never unlocked: the thread's credentials changed, and it must outlive the process it
		// traces. Go ends the thread with this goroutine.
		goruntime.LockOSThread()
		proc, err := cloneUserNS(base)
		if err != nil {
			ready <- err
			return
		}
		defer func() {
			_ = proc.Kill()
			_, _ = proc.Wait()
		}()
		m := fmt.Sprintf("0 %d %d\n", base, IDRangeSize)
		for _, f := range []string{"uid_map", "gid_map"} {
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", proc.Pid, f), []byte(m), 0); err != nil {
				ready <- fmt.Errorf("write %s: %w", f, err)
				return
			}
		}
		u.Path = fmt.Sprintf("/proc/%d/ns/user", proc.Pid)
		if u.File, err = os.Open(u.Path); err != nil {
			ready <- err
			return
		}
		ready <- nil
		<-u.release
	}()
	if err := <-ready; err != nil {
		<-u.done
		return nil, fmt.Errorf("create a user namespace for host ids %d+%d: %w", base, IDRangeSize, err)
	}
	return u, nil
}

// cloneUserNS starts the process holding a new user namespace owned by base (see newUserNS).
// It must run on a locked thread, which keeps euid base if restoring root fails (and then dies).
func cloneUserNS(base uint32) (*os.Process, error) {
	// The dumpable flag is the process's: one clone at a time, so each puts back what was.
	cloneMu.Lock()
	defer cloneMu.Unlock()
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err := setEUID(int(base)); err != nil {
		return nil, err
	}
	proc, err := os.StartProcess("/proc/self/exe", []string{"sandboxd-userns"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER,
		Ptrace:     true,
		// Should the thread ever end first, the process must not go on to run this binary.
		Pdeathsig: unix.SIGKILL,
	}})
	if rerr := setEUID(0); rerr != nil {
		if proc != nil {
			_ = proc.Kill()
			_, _ = proc.Wait()
		}
		return nil, rerr
	}
	// A change of effective uid makes the process undumpable (its /proc files root's, no core
	// dumps): as it was, now that the thread is root again.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(dumpable), 0, 0, 0)
	return proc, err
}

var cloneMu sync.Mutex

// setEUID sets the effective uid of the calling thread alone (Go's Setresuid would set every
// thread's); its real and saved uids, 0, let it go back.
func setEUID(uid int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		return fmt.Errorf("set the thread's effective uid to %d: %w", uid, e)
	}
	return nil
}

// Close ends the process holding the namespace and closes File.
func (u *userNS) Close() {
	close(u.release)
	<-u.done
	u.File.Close()
}

// mountIDMapped mounts a read-only copy of the directory src at target (which must exist),
// with host ids shifted by userns's mapping.
func mountIDMapped(src, target string, userns *os.File) error {
	return mountIDMappedAttr(src, target, userns, unix.MOUNT_ATTR_RDONLY)
}

// mountIDMappedAttr is mountIDMapped with the mount attributes attr (besides idmap and nodev).
func mountIDMappedAttr(src, target string, userns *os.File, attr uint64) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	set := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NODEV | attr,
		Userns_fd: uint64(userns.Fd()),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, set); err != nil {
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
