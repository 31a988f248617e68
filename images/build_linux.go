//go:build linux

package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/internal/mountinfo"
)

// Build builds image name unless the built image already matches its definition; see BuildWith.
func (s *Store) Build(ctx context.Context, name string, progress io.Writer) (Image, error) {
	return s.BuildWith(ctx, name, progress, BuildOptions{})
}

// BuildWith builds image name: it writes the definition to a temporary directory, runs its
// build.sh (as root) into a new rootfs generation, installs the harnesses its manifest lists
// (harness/install.sh runs their Install scripts in the rootfs), and switches image.json to it.
// Each Write to progress is one line of the script's combined output, ending in "\n"; the
// store's own lines go to its Stage method when progress is a Stager. When the built image's
// digest equals the definition's, it returns the built image without building, unless
// opts.Force. A failed or cancelled build leaves the previous image as it was and no temporary
// directory. Concurrent builds of one name (in any process) run one after the other.
func (s *Store) BuildWith(ctx context.Context, name string, progress io.Writer, opts BuildOptions) (Image, error) {
	if !validName(name) || !s.known(name) {
		return Image{}, fmt.Errorf("image %q: no definition: %w", name, ErrUnknown)
	}
	hs, err := s.harnesses(name)
	if err != nil {
		return Image{}, err
	}
	dg, err := digest(s.defs(), name, hs)
	if err != nil {
		return Image{}, err
	}
	return s.make(ctx, job{name: name, digest: dg, force: opts.Force, fill: func(ctx context.Context, build, rootfs string, lock *os.File, progress io.Writer) (meta, error) {
		defDir := filepath.Join(build, "definition")
		if err := writeDefinition(s.defs(), sources(name, hs), defDir); err != nil {
			return meta{}, err
		}
		mirror := s.Mirror
		if mirror == "" {
			mirror = HostMirror()
		}
		stage(progress, "building image %s (%s) from %s", name, dg, mirror)
		if err := runScript(ctx, filepath.Join(defDir, name, "build.sh"), []string{rootfs, mirror}, lock, progress); err != nil {
			return meta{}, err
		}
		carried, err := installHarnesses(ctx, build, defDir, rootfs, hs, lock, progress)
		if err != nil {
			return meta{}, err
		}
		return meta{Kind: KindDefinition, Mirror: mirror, Harnesses: carried}, nil
	}}, progress)
}

// job is what one kind of build does beyond what every build shares (see Store.make).
type job struct {
	name   string
	digest string
	force  bool
	// fill writes the new root filesystem into rootfs (an empty directory under build, the
	// build's own temporary directory) and returns what image.json records besides the name,
	// digest, time, size and generation.
	fill func(ctx context.Context, build, rootfs string, lock *os.File, progress io.Writer) (meta, error)
}

// make runs j under the image's build lock: it returns the built image unchanged when its digest
// is j's (unless j.force), else fills a new rootfs generation in a temporary directory, switches
// image.json to it and prunes old generations. A failed or cancelled build leaves the previous
// image as it was and no temporary directory.
func (s *Store) make(ctx context.Context, j job, progress io.Writer) (Image, error) {
	name := j.name
	if progress == nil {
		progress = io.Discard
	}
	dir := s.imageDir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	lock, err := s.lock(ctx, name, progress)
	if err != nil {
		return Image{}, err
	}
	defer lock.Close()

	// Under the lock no other build of name runs, so any .build-* is a crashed build's.
	s.removeBuildDirs(name, progress)
	old, err := s.readMeta(name)
	hasOld := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(progress, "W: ignoring the unreadable built image: %v\n", err)
	}
	if hasOld && old.Digest == j.digest && !j.force {
		img := old.image(dir)
		if _, err := os.Stat(img.Path); err == nil {
			stage(progress, "image %s is up to date (%s)", name, j.digest)
			return img, nil
		}
	}

	build, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	defer func() {
		if err := unmountUnder(build); err != nil {
			fmt.Fprintf(progress, "W: %v\n", err)
		}
		if err := removeTree(build); err != nil {
			fmt.Fprintf(progress, "W: %v\n", err)
		}
	}()
	rootfs := filepath.Join(build, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	m, err := j.fill(ctx, build, rootfs, lock, progress)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	// What fill mounted (a derived build's /proc and /dev) must be gone before the rename.
	if err := unmountUnder(rootfs); err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	size, err := diskUsage(rootfs)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	gen := generationName(j.digest, rand.Uint32())
	if err := os.Rename(rootfs, filepath.Join(dir, gen)); err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	m.Name, m.Digest, m.SizeBytes, m.Rootfs = name, j.digest, size, gen
	m.Built = time.Now().UTC().Truncate(time.Second)
	if hasOld {
		m.Previous = old.Rootfs
	}
	if err := s.writeMeta(m); err != nil {
		_ = removeTree(filepath.Join(dir, gen))
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	stage(progress, "built image %s: %d MiB", name, size>>20)
	s.prune(name, m, progress)
	return m.image(dir), nil
}

// Delete removes built image name: image.json first (so it is gone for every reader at once),
// then its rootfs generations, then its directory. A generation a mount on the host still uses is
// kept (and named in the error). A definition stays: its image can be built again. Whether a
// sandbox uses the image is the caller's to check.
func (s *Store) Delete(ctx context.Context, name string) error {
	if _, err := s.Get(name); err != nil {
		return err
	}
	lock, err := s.lock(ctx, name, io.Discard)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := os.Remove(s.metaPath(name)); err != nil {
		return fmt.Errorf("image %s: %w", name, err)
	}
	entries, err := os.ReadDir(s.imageDir(name))
	if err != nil {
		return fmt.Errorf("image %s: %w", name, err)
	}
	inUse := mountedPaths()
	var errs []error
	for _, e := range entries {
		p := filepath.Join(s.imageDir(name), e.Name())
		if inUse(p) {
			errs = append(errs, fmt.Errorf("%s is still mounted: it is removed with the next build of %s", p, name))
			continue
		}
		if err := removeTree(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(s.imageDir(name)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("image %s deleted, but: %w", name, errors.Join(errs...))
	}
	return nil
}

// Prune removes the rootfs generations of image name other than the current and the previous
// one that no mount on the host uses. Build prunes on its own; the daemon may call Prune after
// sandboxes on an old generation stop.
func (s *Store) Prune(ctx context.Context, name string) error {
	if !validName(name) {
		return fmt.Errorf("image %q: %w", name, ErrUnknown)
	}
	lock, err := s.lock(ctx, name, io.Discard)
	if err != nil {
		return err
	}
	defer lock.Close()
	m, err := s.readMeta(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var warnings bytes.Buffer
	s.prune(name, m, &warnings)
	if warnings.Len() > 0 {
		return fmt.Errorf("image %s: prune: %s", name, strings.TrimSpace(warnings.String()))
	}
	return nil
}

func (s *Store) prune(name string, m meta, progress io.Writer) {
	entries, err := os.ReadDir(s.imageDir(name))
	if err != nil {
		fmt.Fprintf(progress, "W: prune image %s: %v\n", name, err)
		return
	}
	var inUse func(string) bool
	for _, e := range entries {
		g := e.Name()
		if !e.IsDir() || !strings.HasPrefix(g, "rootfs-") || g == m.Rootfs || g == m.Previous {
			continue
		}
		if inUse == nil {
			inUse = mountedPaths()
		}
		p := filepath.Join(s.imageDir(name), g)
		if inUse(p) {
			continue // a sandbox still runs on it; a later build or Prune removes it
		}
		if err := removeTree(p); err != nil {
			fmt.Fprintf(progress, "W: %v\n", err)
		}
	}
}

// lock takes <Dir>/<name>.lock, waiting (cancellably) while another build holds it. Closing the
// returned file releases it.
func (s *Store) lock(ctx context.Context, name string, progress io.Writer) (*os.File, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, name+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	waited := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("image %s: lock: %w", name, err)
		}
		if !waited {
			fmt.Fprintf(progress, "waiting for another build of image %s\n", name)
			waited = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Store) removeBuildDirs(name string, progress io.Writer) {
	stale, _ := filepath.Glob(filepath.Join(s.imageDir(name), ".build-*"))
	for _, p := range stale {
		// A build cut short by a crash may have left debootstrap's /proc and /sys mounted.
		if err := unmountUnder(p); err != nil {
			fmt.Fprintf(progress, "W: %v\n", err)
		}
		if err := removeTree(p); err != nil {
			fmt.Fprintf(progress, "W: %v\n", err)
		}
	}
}

// writeDefinition copies the directories dirs of defs into dir.
func writeDefinition(defs fs.FS, dirs []string, dir string) error {
	for _, sub := range dirs {
		err := fs.WalkDir(defs, sub, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if sub == sharedDir && errors.Is(err, fs.ErrNotExist) {
					return fs.SkipDir
				}
				return err
			}
			dst := filepath.Join(dir, filepath.FromSlash(p))
			if d.IsDir() {
				return os.MkdirAll(dst, 0o755)
			}
			b, err := fs.ReadFile(defs, p)
			if err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if path.Ext(p) == ".sh" {
				mode = 0o755
			}
			return os.WriteFile(dst, b, mode)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// installHarnesses runs harness/install.sh ROOTFS SCRIPT..., one script per harness (its
// adapter's Install, written to <build>/harnesses/<name>.sh), then checks that each harness's
// program is in the rootfs. It returns what the image carries.
func installHarnesses(ctx context.Context, build, defDir, rootfs string, hs []adapter.Adapter, lock *os.File, progress io.Writer) ([]Harness, error) {
	if len(hs) == 0 {
		return nil, nil
	}
	scripts := filepath.Join(build, "harnesses")
	if err := os.Mkdir(scripts, 0o755); err != nil {
		return nil, err
	}
	args := []string{rootfs}
	for _, a := range hs {
		p := filepath.Join(scripts, a.Name+".sh")
		if err := os.WriteFile(p, []byte(a.Install), 0o644); err != nil {
			return nil, err
		}
		args = append(args, p)
	}
	if err := runScript(ctx, filepath.Join(defDir, harnessDir, "install.sh"), args, lock, progress); err != nil {
		return nil, err
	}
	var carried []Harness
	for _, a := range hs {
		// Lstat: the program may be a symlink (node_modules/.bin) that resolves only inside.
		if _, err := os.Lstat(filepath.Join(rootfs, a.Argv[0])); err != nil {
			return nil, fmt.Errorf("harness %s: its install script ran, but %s is not in the image", a.Name, a.Argv[0])
		}
		carried = append(carried, Harness{Name: a.Name, Version: a.Version})
	}
	return carried, nil
}

// runScript runs a build script (build.sh ROOTFS MIRROR, harness/install.sh ROOTFS SCRIPT...),
// streaming its output to progress line by line. In the daemon's own mount namespace: a
// namespace of its own would hold copies of every workspace and volume pool mounted when it was
// made, keeping them busy for the minutes a build takes. The mounts debootstrap makes inside the
// rootfs are removed after the script instead, however it ended (see unmountUnder).
func runScript(ctx context.Context, script string, args []string, lock *os.File, progress io.Writer) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{script}, args...)...)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = buildEnv()
	return runBuildCmd(ctx, cmd, path.Base(script), lock, progress)
}

// runBuildCmd runs cmd, a step of a build, streaming its combined output to progress line by
// line. It inherits the build lock, so a build orphaned by a daemon crash keeps holding it until
// it ends and the next build cannot remove the directory it is writing to.
func runBuildCmd(ctx context.Context, cmd *exec.Cmd, what string, lock *os.File, progress io.Writer) error {
	lw := &lineWriter{w: progress}
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = lw, lw
	cmd.ExtraFiles = []*os.File{lock}
	// Its own process group, so a cancel kills debootstrap and dpkg too, not just the shell.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	lw.flush()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("build cancelled: %w", ctx.Err())
	}
	return fmt.Errorf("%s failed: %w; last output:\n%s", what, err, strings.Join(lw.tail, "\n"))
}

func buildEnv() []string {
	env := os.Environ()
	p := os.Getenv("PATH")
	if p == "" {
		p = "/usr/bin:/bin"
	}
	// debootstrap, chroot and useradd live in sbin, often missing from a non-login PATH.
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		if !slices.Contains(filepath.SplitList(p), d) {
			p += ":" + d
		}
	}
	return append(env, "PATH="+p, "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8")
}

// lineWriter passes on complete lines, one Write each, and keeps the last few for errors.
type lineWriter struct {
	w    io.Writer
	buf  []byte
	tail []string
}

const (
	maxLine  = 4096
	tailSize = 15
)

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) > maxLine {
				l.emit(l.buf)
				l.buf = l.buf[:0]
			}
			return len(p), nil
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

func (l *lineWriter) emit(line []byte) {
	s := strings.TrimRight(string(line), "\r")
	_, _ = io.WriteString(l.w, s+"\n") // a gone progress reader must not fail the build
	l.tail = append(l.tail, s)
	if len(l.tail) > tailSize {
		l.tail = l.tail[1:]
	}
}

func (l *lineWriter) flush() {
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = nil
	}
}

// diskUsage sums the blocks allocated under root, counting hard-linked files once.
func diskUsage(root string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := inode{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// unmountUnder detaches every mount at or below dir in the daemon's mount namespace, deepest
// first: what a build script (debootstrap's /proc, /sys, /dev/pts) left behind.
func unmountUnder(dir string) error {
	targets, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range targets {
		if err := unix.Unmount(t, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// removeTree removes dir, refusing if anything is mounted inside it: RemoveAll would reach
// into the mount (a bind-mounted /dev in a crashed chroot build, say).
func removeTree(dir string) error {
	ms, err := mountinfo.Self()
	if err != nil {
		return fmt.Errorf("not removing %s: %w", dir, err)
	}
	if mountinfo.Mentions(ms, dir) {
		return fmt.Errorf("not removing %s: something is mounted inside it", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// mountedPaths returns a test for "is p, or something below p, used by a mount in any mount
// namespace on the host" (as a mount point, a bind mount's source or an overlay layer).
func mountedPaths() func(p string) bool {
	nss := mountinfo.Namespaces()
	return func(p string) bool {
		return slices.ContainsFunc(nss, func(ns mountinfo.Namespace) bool { return mountinfo.Mentions(ns.Mounts, p) })
	}
}
