//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/mountinfo"
)

// Layout of Spec.LayerDir.
const (
	upperName  = "upper"
	workName   = "work"
	mergedName = "merged"
	trashMark  = ".trash-"
	initLog    = "init.log"
)

// mountRootfs wipes the upper layer, mounts a fresh overlay of image and upper at
// layerDir/merged and writes the sandbox's /etc/hostname and /etc/hosts into it, and
// /etc/resolv.conf when nameserver is set.
func mountRootfs(imageDir, layerDir, hostname, nameserver string) (string, error) {
	for _, p := range []string{imageDir, layerDir} {
		if strings.ContainsAny(p, ",:") {
			return "", fmt.Errorf("path %q: overlay paths must not contain ',' or ':'", p)
		}
	}
	if st, err := os.Stat(imageDir); err != nil {
		return "", fmt.Errorf("image: %w", err)
	} else if !st.IsDir() {
		return "", fmt.Errorf("image %q is not a directory", imageDir)
	}
	if err := os.MkdirAll(layerDir, 0o700); err != nil {
		return "", err
	}
	upper := filepath.Join(layerDir, upperName)
	work := filepath.Join(layerDir, workName)
	merged := filepath.Join(layerDir, mergedName)
	if err := unmountAll(merged); err != nil {
		return "", err
	}
	if err := wipeLayer(layerDir, upper, work); err != nil {
		return "", err
	}
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", imageDir, upper, work)
	// index=off: the inodes index (for hard-link copy-up and NFS export) costs ~8 ms per mount
	// here and ties an upper dir to one lower. volatile skips syncs of an upper layer that is
	// thrown away at the next start anyway. Older kernels may lack either option.
	var err error
	for _, opts := range []string{",index=off,volatile", ",index=off", ""} {
		err = unix.Mount("overlay", merged, "overlay", 0, data+opts)
		if !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("mount overlay on %s: %w", merged, err)
	}
	if err := writeEtc(merged, hostname, nameserver); err != nil {
		_ = unmountAll(merged)
		return "", err
	}
	return merged, nil
}

// wipeLayer moves the old upper and work dirs aside and deletes them in the background, so a
// large upper layer does not slow the start down.
func wipeLayer(layerDir, upper, work string) error {
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, d := range []string{upper, work} {
		err := os.Rename(d, filepath.Join(layerDir, trashMark+stamp+"-"+filepath.Base(d)))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wipe upper layer: %w", err)
		}
	}
	// Also picks up trash a crashed daemon left behind.
	trash, _ := filepath.Glob(filepath.Join(layerDir, trashMark+"*"))
	if len(trash) > 0 {
		go func() {
			for _, t := range trash {
				_ = os.RemoveAll(t)
			}
		}()
	}
	return nil
}

// unmountAll unmounts everything stacked on dir, detaching lazily if something holds it busy.
func unmountAll(dir string) error {
	for range 16 {
		err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not a mount point (any more)
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", dir, err)
			}
		default:
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", dir)
}

// RemoveLayer removes a layer directory (a Spec.LayerDir) that no sandbox uses any more, such as
// one whose sandbox's state was lost with the overlay still mounted: everything mounted at or
// under it is unmounted first (detached lazily if busy), so nothing is deleted through a mount.
// A missing directory is not an error. Stop the sandbox first: its rootfs goes from under it.
func (r *Runtime) RemoveLayer(layerDir string) error {
	if !filepath.IsAbs(layerDir) || filepath.Clean(layerDir) == "/" {
		return fmt.Errorf("runtime: layer dir must be an absolute path below /, got %q", layerDir)
	}
	// mountinfo has symlink-free paths; the layer dir itself is never a link the runtime made.
	layerDir = filepath.Clean(layerDir)
	parent, err := filepath.EvalSymlinks(filepath.Dir(layerDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("runtime: remove layer: %w", err)
	}
	dir := filepath.Join(parent, filepath.Base(layerDir))
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for range 4 {
		targets, err := mountinfo.Under(dir) // deepest first: a mount with another inside it is busy
		if err != nil {
			return fmt.Errorf("runtime: remove layer: %w", err)
		}
		if len(targets) == 0 {
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("runtime: remove layer: %w", err)
			}
			return nil
		}
		for _, t := range targets {
			if err := unmountAll(t); err != nil {
				return fmt.Errorf("runtime: remove layer: %w", err)
			}
		}
	}
	return fmt.Errorf("runtime: remove layer: %s stays mounted", dir)
}

// writeEtc writes /etc/hostname, /etc/hosts and (with a nameserver) /etc/resolv.conf into the
// rootfs without following symlinks, so an image cannot point the writes at the host. An image's
// resolv.conf that is a symlink (systemd-resolved's stub) is replaced by a file.
func writeEtc(rootfs, hostname, nameserver string) error {
	if hostname == "" {
		return nil
	}
	root, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open rootfs: %w", err)
	}
	defer unix.Close(root)
	etc, err := unix.Openat(root, "etc", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(root, "etc", 0o755); err != nil {
			return fmt.Errorf("mkdir /etc: %w", err)
		}
		etc, err = unix.Openat(root, "etc", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return fmt.Errorf("open /etc: %w", err)
	}
	defer unix.Close(etc)
	hosts := "127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"127.0.1.1\t" + hostname + "\n"
	files := map[string]string{"hostname": hostname + "\n", "hosts": hosts}
	if nameserver != "" {
		files["resolv.conf"] = "nameserver " + nameserver + "\n"
	}
	for name, content := range files {
		if err := unix.Unlinkat(etc, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("replace /etc/%s: %w", name, err)
		}
		fd, err := unix.Openat(etc, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		_, werr := f.WriteString(content)
		cerr := f.Close()
		if werr != nil || cerr != nil {
			return fmt.Errorf("write /etc/%s: %w", name, errors.Join(werr, cerr))
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
