package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// A spare sandbox (Spec.Spare) is started ahead of need and given its workspace, hostname and
// network by Adopt when a create takes it: a create then costs a mount, a hostname and the
// egress's attach instead of a whole start. The workspace reaches it through mount
// propagation: its /workspace is a bind of a slot on the host that is a shared mount, and the
// sandbox's copy of it, in a mount namespace its own user namespace owns, is a slave, which
// receives what the host mounts on the slot and can send nothing back.

// workspaceSlot is the name, in a spare's layer directory, of its workspace slot.
const workspaceSlot = "workspace-slot"

// makeWorkspaceSlot makes layerDir's workspace slot: a directory bound onto itself and made
// shared.
func makeWorkspaceSlot(layerDir string) error {
	slot := filepath.Join(layerDir, workspaceSlot)
	if err := os.Mkdir(slot, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("workspace slot: %w", err)
	}
	if err := unix.Mount(slot, slot, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("workspace slot: bind %s: %w", slot, err)
	}
	if err := unix.Mount("", slot, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("workspace slot: make %s shared: %w", slot, err)
	}
	return nil
}

// Adopt gives the running spare sandbox id (started with Spec.Spare) its hostname, workspace
// and network. The workspace is mounted as a start mounts it, idmapped with the sandbox's own
// mapping. On an error the caller stops the sandbox: it may be half given.
func (r *Runtime) Adopt(ctx context.Context, id string, a AdoptSpec) error {
	if err := validID(id); err != nil {
		return err
	}
	if a.Hostname == "" || a.Workspace == nil {
		return fmt.Errorf("runtime: adopt needs a hostname and a workspace")
	}
	unlock := r.lock(id)
	defer unlock()
	w := r.watch(id)
	b, err := os.ReadFile(r.rootfsRecord(id))
	if w == nil || err != nil {
		return ErrNotRunning
	}
	rootfs := string(b)

	// The network, the hostname and the workspace need nothing of each other.
	network := make(chan error, 1)
	if a.Network != nil {
		go func() { network <- a.Network(ctx) }()
	} else {
		network <- nil
	}
	hostname := make(chan error, 1)
	go func() { hostname <- setHostname(w, rootfs, a.Hostname) }()
	dir, err := a.Workspace()
	if err == nil && !filepath.IsAbs(dir) {
		err = fmt.Errorf("the workspace must be an absolute path, got %q", dir)
	}
	if err == nil {
		err = mountWorkspace(w, dir, filepath.Join(filepath.Dir(rootfs), workspaceSlot))
	}
	err = errors.Join(err, <-hostname)
	// Waited for even when the rest failed: the caller's clean-up must not race it.
	if netErr := <-network; netErr != nil {
		err = errors.Join(err, netErr)
	}
	if err != nil {
		return fmt.Errorf("runtime: adopt %s: %w", id, err)
	}
	return nil
}

// nsFile opens the namespace kind (user, uts) of the init w watches, and checks, once it is
// open, that the pid still is that init: the pidfd says whether it has exited.
func nsFile(w *initWatch, kind string) (*os.File, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", w.pid, kind))
	if err != nil {
		return nil, err
	}
	if w.exited() {
		f.Close()
		return nil, ErrNotRunning
	}
	return f, nil
}

// mountWorkspace mounts dir on the spare's slot, idmapped with the user namespace of its init:
// the mount propagates to the sandbox's /workspace.
func mountWorkspace(w *initWatch, dir, slot string) error {
	userns, err := nsFile(w, "user")
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	defer userns.Close()
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("workspace: clone %s: %w", dir, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("workspace: idmap %s: %w", dir, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, slot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("workspace: mount on %s: %w", slot, err)
	}
	return nil
}

// setHostname gives the spare its hostname: the kernel's, from a thread that joins the
// sandbox's UTS namespace and ends with it, and /etc/hostname and /etc/hosts in its root
// (rootfs, the overlay's mount on the host), owned as the spare's start wrote them.
func setHostname(w *initWatch, rootfs, hostname string) error {
	uts, err := nsFile(w, "uts")
	if err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	defer uts.Close()
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in the sandbox's UTS namespace, exits with the goroutine.
		goruntime.LockOSThread()
		if err := unix.Setns(int(uts.Fd()), unix.CLONE_NEWUTS); err != nil {
			done <- err
			return
		}
		done <- unix.Sethostname([]byte(hostname))
	}()
	if err := <-done; err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(rootfs, "etc", "hostname"), &st); err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	return writeEtc(rootfs, int(st.Uid), hostname, "", nil)
}
