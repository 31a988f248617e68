//go:build linux

package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Derive makes image name by running opts.Steps, one shell script each, as root in a copy of
// image opts.From's root filesystem; see DeriveOptions. The new image records its parent and
// steps, keeps the parent's exec defaults and harnesses, and is independent of the parent: a
// rebuild or delete of the parent leaves it as it is.
func (s *Store) Derive(ctx context.Context, name string, opts DeriveOptions, progress io.Writer) (Image, error) {
	if err := s.checkUserName(name); err != nil {
		return Image{}, err
	}
	if opts.From == name {
		return Image{}, fmt.Errorf("image %s: %w: an image cannot be derived from itself", name, ErrUnknown)
	}
	parent, err := s.Get(opts.From)
	if err != nil {
		return Image{}, err
	}
	dg := derivedDigest(parent.Digest, opts.Steps)
	return s.make(ctx, job{name: name, digest: dg, force: opts.Force, fill: func(ctx context.Context, _, rootfs string, lock *os.File, progress io.Writer) (meta, error) {
		stage(progress, "copying image %s (%d MiB)", parent.Name, parent.SizeBytes>>20)
		if err := copyTree(ctx, parent.Path, rootfs); err != nil {
			return meta{}, err
		}
		if err := runSteps(ctx, rootfs, parent.Env, opts.Steps, lock, progress); err != nil {
			return meta{}, err
		}
		return meta{Kind: KindDerived, From: parent.Name, FromDigest: parent.Digest, Steps: opts.Steps,
			Env: parent.Env, WorkDir: parent.WorkDir, Harnesses: parent.Harnesses}, nil
	}}, progress)
}

// checkUserName refuses a name that is not valid or that a definition owns, for images made
// from something else than a definition.
func (s *Store) checkUserName(name string) error {
	if !validName(name) {
		return fmt.Errorf("image %q: %w", name, ErrUnknown)
	}
	if s.known(name) {
		return fmt.Errorf("image %s: %w: choose another name", name, ErrDefinitionName)
	}
	return nil
}

// copyTree copies the root filesystem src into the empty directory dst, keeping owners, modes,
// hard links, special files and extended attributes. A copy and not an overlay: the derived
// image must not change when its parent is rebuilt or deleted, and a flattened overlay costs the
// same copy in the end. --reflink=auto makes it near free on a filesystem that clones.
func copyTree(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", src+"/.", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runSteps runs each step as root with /bin/sh -e in a chroot of rootfs, with /proc, the host's
// /dev and the host's resolver for the network (the host's own, as the definition builds do).
// env is the image's exec defaults; the steps' output goes to progress.
func runSteps(ctx context.Context, rootfs string, env []string, steps []string, lock *os.File, progress io.Writer) error {
	restore, err := enterRootfs(rootfs)
	if err != nil {
		return err
	}
	defer func() {
		if err := restore(); err != nil {
			fmt.Fprintf(progress, "W: %v\n", err)
		}
	}()
	base := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "USER=root",
		"LOGNAME=root", "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8"}
	for i, step := range steps {
		stage(progress, "step %d of %d: %s", i+1, len(steps), summary(step))
		cmd := exec.CommandContext(ctx, "/bin/sh", "-ec", step)
		// Go's exec dedups Env keeping the last value: the image's variables win over base.
		cmd.Env = append(append([]string{}, base...), env...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
		if err := runBuildCmd(ctx, cmd, fmt.Sprintf("step %d", i+1), lock, progress); err != nil {
			if ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("%w: %w", ErrStepFailed, err)
		}
	}
	return nil
}

// summary is a step's first line, shortened, for a stage line.
func summary(step string) string {
	line, _, more := strings.Cut(strings.TrimSpace(step), "\n")
	if len(line) > 72 {
		line, more = line[:72], true
	}
	if more {
		line += " …"
	}
	return line
}

// enterRootfs makes rootfs ready for steps: /proc and the host's /dev mounted (in the daemon's
// mount namespace; the build removes them however it ends) and the host's resolv.conf in place
// of the image's (restored after: the runtime writes each sandbox's own). It refuses a /proc,
// /dev or /etc that is a symlink, which would aim the mount or the write at the host.
func enterRootfs(rootfs string) (restore func() error, err error) {
	for _, d := range []string{"proc", "dev"} {
		p := filepath.Join(rootfs, d)
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			err = os.Mkdir(p, 0o755)
		} else if err == nil && !st.IsDir() {
			err = fmt.Errorf("/%s is not a directory", d)
		}
		if err != nil {
			return nil, fmt.Errorf("prepare %s: %w", p, err)
		}
	}
	if err := unix.Mount("proc", filepath.Join(rootfs, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.Mount("/dev", filepath.Join(rootfs, "dev"), "", unix.MS_BIND, ""); err != nil {
		return nil, errors.Join(fmt.Errorf("mount /dev: %w", err), unmountUnder(rootfs))
	}
	undoResolv, err := swapResolvConf(rootfs)
	if err != nil {
		return nil, errors.Join(err, unmountUnder(rootfs))
	}
	return func() error { return errors.Join(undoResolv(), unmountUnder(rootfs)) }, nil
}

// swapResolvConf puts the host's /etc/resolv.conf in rootfs and returns what puts the image's
// back (a file's content or a symlink). os.Root keeps every access inside rootfs.
func swapResolvConf(rootfs string) (undo func() error, err error) {
	host, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return func() error { return nil }, nil // no resolver to give: the steps run offline
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, err
	}
	const name = "etc/resolv.conf"
	if st, err := root.Lstat("etc"); err != nil || !st.IsDir() {
		root.Close()
		return func() error { return nil }, nil // no /etc: nothing resolves names there anyway
	}
	var content []byte
	var link string
	var mode fs.FileMode = 0o644
	existed := true
	st, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		existed = false
	case err != nil:
		root.Close()
		return nil, err
	case st.Mode()&fs.ModeSymlink != 0:
		if link, err = root.Readlink(name); err != nil {
			root.Close()
			return nil, err
		}
	default:
		if content, err = root.ReadFile(name); err != nil {
			root.Close()
			return nil, err
		}
		mode = st.Mode().Perm()
	}
	if err := root.Remove(name); err != nil && existed {
		root.Close()
		return nil, fmt.Errorf("replace /etc/resolv.conf: %w", err)
	}
	if err := root.WriteFile(name, host, 0o644); err != nil {
		root.Close()
		return nil, fmt.Errorf("write /etc/resolv.conf: %w", err)
	}
	return func() error {
		defer root.Close()
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore /etc/resolv.conf: %w", err)
		}
		switch {
		case !existed:
			return nil
		case link != "":
			return root.Symlink(link, name)
		default:
			return root.WriteFile(name, content, mode)
		}
	}, nil
}
