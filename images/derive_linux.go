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
	"time"

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
	if opts.Runner == nil {
		return Image{}, errors.New("images: derive needs a step runner")
	}
	parent, err := s.Get(opts.From)
	if err != nil {
		return Image{}, err
	}
	dg := derivedDigest(parent.Digest, opts.Steps)
	return s.make(ctx, job{name: name, digest: dg, force: opts.Force, fill: func(ctx context.Context, _, rootfs string, _ *os.File, progress io.Writer) (meta, error) {
		stage(progress, "copying image %s (%d MiB)", parent.Name, parent.SizeBytes>>20)
		if err := copyTree(ctx, parent.Path, rootfs); err != nil {
			return meta{}, err
		}
		if err := runSteps(ctx, opts.Runner, name, rootfs, parent.Env, opts.Steps, progress); err != nil {
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

// keptEtc are the files a runner may write for the steps (the sandbox's name and resolver) and
// the build puts back as the parent had them, whatever the steps did with them: a sandbox of
// the new image gets its own.
var keptEtc = []string{"etc/hostname", "etc/hosts", "etc/resolv.conf"}

// runSteps runs each step as root with /bin/sh -e in rootfs through runner, with env (the
// image's exec defaults) over a root login's environment; the steps' output goes to progress.
// The first step that fails fails the build with ErrStepFailed, naming it.
func runSteps(ctx context.Context, runner StepRunner, name, rootfs string, env []string, steps []string, progress io.Writer) (retErr error) {
	restoreEtc, err := keepFiles(rootfs, keptEtc)
	if err != nil {
		return err
	}
	sess, err := runner.Start(ctx, name, rootfs, progress)
	if err != nil {
		return errors.Join(err, restoreEtc())
	}
	defer func() {
		// The session must be gone before the files go back: nothing may write them after.
		if err := sess.Close(context.WithoutCancel(ctx)); err != nil {
			retErr = errors.Join(retErr, err)
			return
		}
		retErr = errors.Join(retErr, restoreEtc())
	}()
	base := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "USER=root",
		"LOGNAME=root", "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8"}
	for i, step := range steps {
		stage(progress, "step %d of %d: %s", i+1, len(steps), summary(step))
		lw := &lineWriter{w: progress}
		// The image's variables come after base, so they win.
		code, err := sess.Run(ctx, step, append(append([]string{}, base...), env...), lw)
		lw.flush()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("build cancelled: %w", ctx.Err())
			}
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		if code != 0 {
			return fmt.Errorf("%w: step %d (%s) exited %d; last output:\n%s", ErrStepFailed, i+1, summary(step), code, strings.Join(lw.tail, "\n"))
		}
	}
	return nil
}

// ChrootRunner runs steps in a chroot on the host, as host root, with /proc, the host's /dev and
// the host's resolver: no isolation at all. It is for tests and tools where no daemon runs;
// sandboxd runs steps in a build sandbox.
type ChrootRunner struct{}

// Start mounts /proc and /dev in rootfs and puts the host's resolv.conf in it.
func (ChrootRunner) Start(_ context.Context, _, rootfs string, _ io.Writer) (StepSession, error) {
	restore, err := enterRootfs(rootfs)
	if err != nil {
		return nil, err
	}
	return &chrootSession{rootfs: rootfs, restore: restore}, nil
}

type chrootSession struct {
	rootfs  string
	restore func() error
}

func (c *chrootSession) Run(ctx context.Context, script string, env []string, out io.Writer) (int, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-ec", script)
	cmd.Env, cmd.Dir = env, "/"
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a cancel kills what the step started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.rootfs, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() == nil {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	return 0, err
}

func (c *chrootSession) Close(context.Context) error { return c.restore() }

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
// back.
func swapResolvConf(rootfs string) (undo func() error, err error) {
	host, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return func() error { return nil }, nil // no resolver to give: the steps run offline
	}
	undo, err = keepFiles(rootfs, []string{"etc/resolv.conf"})
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, errors.Join(err, undo())
	}
	defer root.Close()
	if st, err := root.Lstat("etc"); err != nil || !st.IsDir() {
		return undo, nil // no /etc: nothing resolves names there anyway
	}
	if err := root.Remove("etc/resolv.conf"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, errors.Join(fmt.Errorf("replace /etc/resolv.conf: %w", err), undo())
	}
	if err := root.WriteFile("etc/resolv.conf", host, 0o644); err != nil {
		return nil, errors.Join(fmt.Errorf("write /etc/resolv.conf: %w", err), undo())
	}
	return undo, nil
}

// keptFile is a file of a root filesystem as it was: absent, a symlink or a regular file.
type keptFile struct {
	name    string
	existed bool
	link    string
	content []byte
	mode    fs.FileMode
	uid     int
	gid     int
}

// keepFiles records the files names (relative to rootfs, below a real directory of it) and
// returns what puts them back as they were: content or symlink, mode and owner, or absent.
// os.Root keeps every access inside rootfs. A name below a directory that is missing or a
// symlink is not kept: nothing writes there.
func keepFiles(rootfs string, names []string) (restore func() error, err error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, err
	}
	var kept []keptFile
	for _, name := range names {
		if st, err := root.Lstat(filepath.Dir(name)); err != nil || !st.IsDir() {
			continue
		}
		k := keptFile{name: name, existed: true, mode: 0o644}
		st, err := root.Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			k.existed, err = false, nil
		case err != nil:
			root.Close()
			return nil, err
		case st.Mode()&fs.ModeSymlink != 0:
			k.link, err = root.Readlink(name)
		case !st.Mode().IsRegular():
			continue // a directory or a device where a file belongs: the runners leave it be too
		default:
			k.content, err = root.ReadFile(name)
			k.mode = st.Mode().Perm()
		}
		if err != nil {
			root.Close()
			return nil, err
		}
		if k.existed {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				k.uid, k.gid = int(sys.Uid), int(sys.Gid)
			}
		}
		kept = append(kept, k)
	}
	return func() error {
		defer root.Close()
		var errs []error
		for _, k := range kept {
			errs = append(errs, k.restore(root))
		}
		return errors.Join(errs...)
	}, nil
}

func (k keptFile) restore(root *os.Root) error {
	if st, err := root.Lstat(k.name); err == nil && st.IsDir() {
		err = root.RemoveAll(k.name)
		if err != nil {
			return fmt.Errorf("restore /%s: %w", k.name, err)
		}
	} else if err := root.Remove(k.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restore /%s: %w", k.name, err)
	}
	if !k.existed {
		return nil
	}
	var err error
	if k.link != "" {
		err = root.Symlink(k.link, k.name)
	} else if err = root.WriteFile(k.name, k.content, k.mode); err == nil {
		err = root.Chmod(k.name, k.mode) // past the umask
	}
	if err == nil {
		err = root.Lchown(k.name, k.uid, k.gid)
	}
	if err != nil {
		return fmt.Errorf("restore /%s: %w", k.name, err)
	}
	return nil
}
