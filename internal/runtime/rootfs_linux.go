//go:build linux

package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
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
	lowerName  = "lower" // the image, idmapped, while the overlay is being mounted
	trashMark  = ".trash-"
	initLog    = "init.log"
)

// mountRootfs wipes the upper layer, mounts a fresh overlay of image and upper at
// layerDir/merged and writes the sandbox's /etc/hostname and /etc/hosts into it,
// /etc/resolv.conf when nameserver is set, and the trust store's files when cas is set. The
// image appears with its ids shifted to the sandbox's range from base, and the upper layer and
// the files written belong to the sandbox's root (host id base), so that root inside owns
// its root filesystem as it would the image's; userns is the sandbox's (see newUserNS).
func mountRootfs(imageDir, layerDir string, base uint32, userns *os.File, hostname, nameserver string, cas []byte) (string, error) {
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
	if err := prepareLayerDir(layerDir, base); err != nil {
		return "", err
	}
	upper := filepath.Join(layerDir, upperName)
	work := filepath.Join(layerDir, workName)
	merged := filepath.Join(layerDir, mergedName)
	lower := filepath.Join(layerDir, lowerName)
	for _, d := range []string{merged, lower} {
		if err := unmountAll(d); err != nil {
			return "", err
		}
	}
	if err := wipeLayer(layerDir, upper, work); err != nil {
		return "", err
	}
	for _, d := range []string{upper, work, merged, lower} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	// The upper dir's owner and mode are those of the sandbox's /.
	if err := os.Chown(upper, int(base), int(base)); err != nil {
		return "", err
	}
	if err := mountIDMapped(imageDir, lower, userns); err != nil {
		return "", err
	}
	// The overlay keeps its own private copy of the idmapped image mount, so the one at lower
	// goes as soon as the overlay is mounted, or the attempt failed.
	defer func() { _ = unmountAll(lower) }()
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	var err error
	// index=off: the inodes index (for hard-link copy-up and NFS export) costs ~8 ms per mount
	// here and ties an upper dir to one lower. volatile skips syncs of an upper layer that is
	// thrown away at the next start anyway. Older kernels may lack either option.
	for _, opts := range []string{",index=off,volatile", ",index=off", ""} {
		err = unix.Mount("overlay", merged, "overlay", 0, data+opts)
		if !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("mount overlay on %s: %w", merged, err)
	}
	if err := writeEtc(merged, int(base), hostname, nameserver, cas); err != nil {
		_ = unmountAll(merged)
		return "", err
	}
	return merged, nil
}

// mountWritableImage mounts imageDir itself, writable and idmapped with userns (see
// Spec.WritableImage), at layerDir/merged and writes the sandbox's /etc files into it as
// mountRootfs does. Through the mapping, what root inside writes is owned by host root on disk. There is no upper layer: the steps of an image
// build change the image they run in, and nothing is left to apply afterwards.
func mountWritableImage(imageDir, layerDir string, base uint32, userns *os.File, hostname, nameserver string, cas []byte) (string, error) {
	if st, err := os.Stat(imageDir); err != nil {
		return "", fmt.Errorf("image: %w", err)
	} else if !st.IsDir() {
		return "", fmt.Errorf("image %q is not a directory", imageDir)
	}
	if err := prepareLayerDir(layerDir, base); err != nil {
		return "", err
	}
	merged := filepath.Join(layerDir, mergedName)
	if err := unmountAll(merged); err != nil {
		return "", err
	}
	if err := os.Mkdir(merged, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	// Written on disk, not through the mapping (where host root has no id to create files as):
	// owned by host root, which is root inside.
	if err := writeEtc(imageDir, 0, hostname, nameserver, cas); err != nil {
		return "", err
	}
	if err := mountIDMappedAttr(imageDir, merged, userns, 0); err != nil {
		return "", err
	}
	return merged, nil
}

// restrictHostView makes the host's view of a started sandbox's root filesystem nosuid and
// nodev, so that a setuid binary or a device node written in the sandbox does nothing for a
// host user who reaches layerDir/merged. It must run once the sandbox's mount namespace exists:
// the sandbox's root is a copy of the mount as it was then, and it keeps setuid (sudo) working
// inside. Before that the merged directory holds only the image and the files writeEtc wrote.
func restrictHostView(merged string) error {
	if err := unix.Mount("", merged, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount %s nosuid,nodev: %w", merged, err)
	}
	return nil
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

// writeEtc writes /etc/hostname, /etc/hosts, (with a nameserver) /etc/resolv.conf and (with
// cas) the trust store's files (see Spec.ExtraCAs) into the rootfs without following symlinks
// out of it, so an image cannot point the writes, or the read of its bundle, at the host. A file
// of the image that is a symlink (systemd-resolved's stub resolv.conf, a bundle linked to
// /etc/pki) is replaced by a file. What it creates belongs to owner (uid and gid), the host id
// of the sandbox's root.
func writeEtc(rootfs string, owner int, hostname, nameserver string, cas []byte) error {
	if hostname == "" {
		return nil
	}
	root, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open rootfs: %w", err)
	}
	defer unix.Close(root)
	etc, err := openDir(root, "etc", false, owner)
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
		if err := replaceFile(etc, name, []byte(content), owner); err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
	}
	if len(cas) > 0 {
		return writeCAs(root, cas, owner)
	}
	return nil
}

// maxBundle caps the image's CA bundle read into memory at every start (Debian's is ~200 KiB).
const maxBundle = 16 << 20

// writeCAs writes cas to ExtraCAPath, each certificate once, and the image's bundle followed by
// those of cas it lacks to CABundlePath. The image's bundle is read as the sandbox would see it:
// a symlink in its path resolves inside the rootfs (RESOLVE_IN_ROOT), never on the host.
func writeCAs(root int, cas []byte, owner int) error {
	cas = notIn(cas, nil)
	dir, name := path.Split(strings.TrimPrefix(ExtraCAPath, "/"))
	fd, err := openDir(root, dir, false, owner)
	if err != nil {
		return fmt.Errorf("open /%s: %w", dir, err)
	}
	err = replaceFile(fd, name, cas, owner)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("write %s: %w", ExtraCAPath, err)
	}

	rel := strings.TrimPrefix(CABundlePath, "/")
	bundle, err := readInRoot(root, rel)
	if err != nil {
		return fmt.Errorf("read the image's %s: %w", CABundlePath, err)
	}
	if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
		bundle = append(bundle, '\n')
	}
	dir, name = path.Split(rel)
	// The directories may be symlinks within the image (/etc/ssl → /usr/lib/ssl): followed
	// inside the rootfs, as the sandbox's readers follow them.
	fd, err = openDir(root, dir, true, owner)
	if err != nil {
		return fmt.Errorf("open /%s: %w", dir, err)
	}
	defer unix.Close(fd)
	// A CA the image trusts already is not repeated: given the host's whole bundle
	// (sandboxd --sandbox-ca), the sandbox's gets only what the host trusts beyond the image.
	if err := replaceFile(fd, name, append(bundle, notIn(cas, certKeys(bundle))...), owner); err != nil {
		return fmt.Errorf("write %s: %w", CABundlePath, err)
	}
	return nil
}

// ImageBundle returns the system CA bundle of the image whose rootfs is dir, read as a sandbox
// of it would read it (a symlink resolves inside the rootfs); nothing if it has none.
func ImageBundle(dir string) ([]byte, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open image %s: %w", dir, err)
	}
	defer unix.Close(root)
	return readInRoot(root, strings.TrimPrefix(CABundlePath, "/"))
}

// readInRoot returns the regular file rel under root as the sandbox sees it, or nothing if
// there is none (a missing file, a dangling symlink, something other than a regular file).
func readInRoot(root int, rel string) ([]byte, error) {
	// O_NONBLOCK: an image's FIFO in its place must not hang the start.
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxBundle+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBundle {
		return nil, fmt.Errorf("larger than %d bytes", maxBundle)
	}
	return b, nil
}

// openDir opens the directory rel under root, creating what is missing (0755, belonging to
// owner). Without inRoot, no component may be a symlink; with it, symlinks resolve inside root,
// as they do for the sandbox's own processes.
func openDir(root int, rel string, inRoot bool, owner int) (int, error) {
	resolve := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS)
	if inRoot {
		resolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	}
	open := func(p string) (int, error) {
		return unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
	}
	fd, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	var prefix string
	for name := range strings.SplitSeq(strings.Trim(rel, "/"), "/") {
		if name == "" {
			continue
		}
		prefix = path.Join(prefix, name)
		next, err := open(prefix)
		if errors.Is(err, unix.ENOENT) {
			// Made in the directory prefix's parent resolved to, so opening prefix again finds it.
			err = unix.Mkdirat(fd, name, 0o755)
			if errors.Is(err, unix.EEXIST) {
				// A symlink leading nowhere inside the rootfs (perhaps to a host path): it
				// leads nowhere for the sandbox either, so a directory takes its place.
				var st unix.Stat_t
				if err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					if err = unix.Unlinkat(fd, name, 0); err == nil {
						err = unix.Mkdirat(fd, name, 0o755)
					}
				}
			}
			if err == nil {
				err = unix.Fchownat(fd, name, owner, owner, unix.AT_SYMLINK_NOFOLLOW)
			}
			if err == nil {
				next, err = open(prefix)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("/%s: %w", prefix, err)
		}
		fd = next
	}
	return fd, nil
}

// replaceFile makes name in dir a new file (0644, belonging to owner) holding content, replacing
// whatever was there (a file or a symlink, which is not followed).
func replaceFile(dir int, name string, content []byte, owner int) error {
	if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	werr := f.Chown(owner, owner)
	if werr == nil {
		_, werr = f.Write(content)
	}
	cerr := f.Close()
	return errors.Join(werr, cerr)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
