//go:build linux

package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/runtime/initproc"
)

// Config says where the runtime keeps its state.
type Config struct {
	// StateDir is libcontainer's state root, e.g. <data>/runtime.
	StateDir string
	// RunDir holds each sandbox's init socket (<RunDir>/<id>.sock) and rootfs record; keep the
	// path short, a socket path must fit in 108 bytes.
	RunDir string
	// InitPath is the host path of the static hiloop-init binary.
	InitPath string
	// Tools are host binaries every sandbox gets read-only at /.hiloop/bin/<name>, e.g. the fake
	// harness: name → host path.
	Tools map[string]string
}

// Runtime starts, stops and execs in sandboxes. It is safe for concurrent use; operations on
// one sandbox id are serialized.
type Runtime struct {
	cfg   Config
	locks sync.Map // id → *sync.Mutex
	// Where the sandboxes' memory cgroups are (memoryDir), found once.
	memOnce   sync.Once
	memParent string // the parent of every sandbox's memory cgroup (see memoryDir)
	memErr    error
	// What Glance looks at: id → *initWatch of every init seen running.
	inits sync.Map
	// id → *os.File: the open oom_kill counters of running sandboxes (oomCounter).
	oomFiles sync.Map
}

// Start waits at most this long for a new sandbox's init to answer when ctx has no deadline.
const startTimeout = 15 * time.Second

// stateFile is the name of libcontainer's record of a container in its directory.
const stateFile = "state.json"

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// New checks cfg and prepares its directories.
func New(cfg Config) (*Runtime, error) {
	if !seccomp.Enabled {
		return nil, errors.New("runtime: this binary was built without seccomp support (build with -tags seccomp and libseccomp-dev)")
	}
	for name, p := range map[string]string{"StateDir": cfg.StateDir, "RunDir": cfg.RunDir, "InitPath": cfg.InitPath} {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("runtime: %s must be an absolute path, got %q", name, p)
		}
	}
	if n := len(filepath.Join(cfg.RunDir, strings.Repeat("x", 32)+".sock")); n >= 108 {
		return nil, fmt.Errorf("runtime: RunDir %q is too long for unix socket paths (%d bytes, limit 107)", cfg.RunDir, n)
	}
	st, err := os.Stat(cfg.InitPath)
	if err != nil {
		return nil, fmt.Errorf("runtime: hiloop-init: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("runtime: hiloop-init %q is not an executable file", cfg.InitPath)
	}
	for name, p := range cfg.Tools {
		if !toolNameRE.MatchString(name) || !filepath.IsAbs(p) {
			return nil, fmt.Errorf("runtime: tool %q at %q: want a plain name and an absolute path", name, p)
		}
	}
	for _, d := range []string{cfg.StateDir, cfg.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runtime: %w", err)
		}
	}
	enterLeafCgroup()
	return &Runtime{cfg: cfg}, nil
}

func (r *Runtime) lock(id string) func() {
	m, _ := r.locks.LoadOrStore(id, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func (r *Runtime) socketPath(id string) string { return filepath.Join(r.cfg.RunDir, id+".sock") }

// rootfsRecord names the file that remembers where a sandbox's overlay is mounted, so Stop
// can unmount it even when libcontainer's state is gone.
func (r *Runtime) rootfsRecord(id string) string { return filepath.Join(r.cfg.RunDir, id+".rootfs") }

func validID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("runtime: invalid sandbox id %q: want [a-z0-9-], at most 32 characters", id)
	}
	return nil
}

// Start starts the sandbox and returns once it can serve an exec. Leftovers of an earlier run
// of the same id (a crashed daemon, a failed stop) are cleaned up first.
func (r *Runtime) Start(ctx context.Context, s Spec) (retErr error) {
	if err := validID(s.ID); err != nil {
		return err
	}
	if !filepath.IsAbs(s.ImageDir) || !filepath.IsAbs(s.LayerDir) {
		return fmt.Errorf("runtime: ImageDir and LayerDir must be absolute paths")
	}
	if s.WorkspaceDir != "" && !filepath.IsAbs(s.WorkspaceDir) {
		return fmt.Errorf("runtime: WorkspaceDir must be an absolute path, got %q", s.WorkspaceDir)
	}
	if s.CPUs < 0 || s.MemoryMB < 0 {
		return fmt.Errorf("runtime: CPUs and MemoryMB must not be negative")
	}
	if s.Spare && (s.WorkspaceDir != "" || s.Workspace != nil || s.WritableImage) {
		return fmt.Errorf("runtime: a spare gets its workspace when adopted, and has an overlay root")
	}
	if err := checkIDBase(s.IDBase); err != nil {
		return err
	}
	if err := CheckSearchable(filepath.Dir(s.LayerDir)); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	if s.Hostname == "" {
		s.Hostname = s.ID
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	unlock := r.lock(s.ID)
	defer unlock()

	if err := r.teardown(ctx, s.ID, 0); err != nil {
		return fmt.Errorf("runtime: clean up earlier run of %s: %w", s.ID, err)
	}
	defer func() {
		if retErr != nil {
			_ = r.teardown(context.Background(), s.ID, 0)
		}
	}()

	merged := filepath.Join(s.LayerDir, mergedName)
	if err := os.WriteFile(r.rootfsRecord(s.ID), []byte(merged), 0o600); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	userns, err := newUserNS(s.IDBase)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	// Held until the sandbox runs in it: libcontainer joins it by its holder's path.
	defer userns.Close()
	mount := mountRootfs
	if s.WritableImage {
		mount = mountWritableImage
	}
	if _, err := mount(s.ImageDir, s.LayerDir, s.IDBase, userns.File, s.Hostname, s.Nameserver, s.ExtraCAs); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	if s.Spare {
		if err := makeWorkspaceSlot(s.LayerDir); err != nil {
			return fmt.Errorf("runtime: %w", err)
		}
	}
	if s.Workspace != nil {
		if s.WorkspaceDir, err = s.Workspace(); err != nil {
			return err
		}
		if !filepath.IsAbs(s.WorkspaceDir) {
			return fmt.Errorf("runtime: the workspace must be an absolute path, got %q", s.WorkspaceDir)
		}
	}
	config, err := containerConfig(s, merged, userns.Path, r.cfg, cgroupName(r.cfg.StateDir, s.ID))
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	listener, err := r.listen(s.ID)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	defer listener.Close()
	logFile, err := os.OpenFile(filepath.Join(s.LayerDir, initLog), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	defer logFile.Close()

	c, err := libcontainer.Create(r.cfg.StateDir, s.ID, config)
	if err != nil {
		return fmt.Errorf("runtime: create container: %w", err)
	}
	p := &libcontainer.Process{
		Args:       []string{initPathInSandbox},
		Env:        []string{"PATH=" + initproc.DefaultPath, "HOME=/root"},
		Cwd:        "/",
		Init:       true,
		Stdout:     logFile,
		Stderr:     logFile,
		ExtraFiles: []*os.File{listener}, // fd 3 in the init
	}
	if err := c.Run(p); err != nil {
		_ = c.Destroy()
		return fmt.Errorf("runtime: start container: %w", err)
	}
	// The init is alone in the cgroup and opens no socket: no buffer escapes the charge.
	if err := r.chargeSockets(s.ID, s.MemoryMB); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	// Reap the init when it exits while this process lives; after a daemon restart it is
	// somebody else's child and nobody here needs to.
	if w := r.watchStarted(s.ID, p); w != nil {
		go w.reap()
	} else {
		go func() { _, _ = p.Wait() }()
	}
	if err := restrictHostView(merged); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	// The init holds the listener now; ours must go, or dials would queue on a dead socket later.
	listener.Close()

	network := make(chan error, 1)
	if s.Network != nil {
		go func() { network <- s.Network(ctx) }()
	} else {
		network <- nil
	}
	readyErr := r.waitReady(ctx, c, s.LayerDir)
	// Waited for even when the init failed: the caller's clean-up must not race it.
	netErr := <-network
	if readyErr != nil {
		return fmt.Errorf("runtime: %w", readyErr)
	}
	return netErr
}

// listen creates the sandbox's init socket and returns it as a file to pass to the init.
func (r *Runtime) listen(id string) (*os.File, error) {
	path := r.socketPath(id)
	_ = os.Remove(path)
	l, err := net.ListenUnix(initproc.Network, &net.UnixAddr{Name: path, Net: initproc.Network})
	if err != nil {
		return nil, err
	}
	// The socket file must outlive this listener: the init serves it, across daemon restarts.
	l.SetUnlinkOnClose(false)
	defer l.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, err
	}
	return l.File()
}

// waitReady pings the init until it answers, failing early if it died.
func (r *Runtime) waitReady(ctx context.Context, c *libcontainer.Container, layerDir string) error {
	delay := time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := r.ping(pctx, c.ID())
		cancel()
		if err == nil {
			return nil
		}
		if st, serr := c.Status(); serr == nil && st == libcontainer.Stopped {
			log, _ := os.ReadFile(filepath.Join(layerDir, initLog))
			return fmt.Errorf("sandbox init exited during start: %s", strings.TrimSpace(string(log)))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox init did not answer: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}

// ping asks the init whether it is serving.
func (r *Runtime) ping(ctx context.Context, id string) error {
	c, err := r.dial(ctx, id)
	if err != nil {
		return err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.UnixConn().SetDeadline(d)
	}
	if err := c.Send(&initproc.Message{Op: initproc.OpPing}); err != nil {
		return err
	}
	var m initproc.Message
	files, err := c.Recv(&m)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return err
	}
	if m.Op != initproc.OpPong {
		return fmt.Errorf("unexpected reply %q to ping", m.Op)
	}
	return nil
}

// dial connects to the sandbox's init; a missing or dead socket is ErrNotRunning.
func (r *Runtime) dial(ctx context.Context, id string) (*initproc.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, initproc.Network, r.socketPath(id))
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, ErrNotRunning
		}
		return nil, err
	}
	return initproc.NewConn(c.(*net.UnixConn)), nil
}

// Stop stops the sandbox: SIGTERM to every process, SIGKILL to what is left after grace, then
// the container, its cgroup, its overlay mount and its socket are removed. Stopping a sandbox
// that is not running, or was started by an earlier daemon process, works the same.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := r.lock(id)
	defer unlock()
	if err := r.teardown(ctx, id, grace); err != nil {
		return fmt.Errorf("runtime: stop %s: %w", id, err)
	}
	return nil
}

// teardown removes everything of sandbox id that exists; it is idempotent.
func (r *Runtime) teardown(ctx context.Context, id string, grace time.Duration) error {
	r.forget(id)
	// A glance, probe or dial during the teardown may open the watch again from libcontainer's
	// state, which is gone once the teardown is done.
	defer r.forget(id)
	var errs []error
	rootfs := ""
	if b, err := os.ReadFile(r.rootfsRecord(id)); err == nil {
		rootfs = string(b)
	}
	c, err := libcontainer.Load(r.cfg.StateDir, id)
	switch {
	case err == nil:
		if rootfs == "" {
			rootfs = c.Config().Rootfs
		}
		if err := stopContainer(ctx, c, grace); err != nil {
			errs = append(errs, err)
		} else if err := c.Destroy(); err != nil {
			errs = append(errs, err)
		}
	case errors.Is(err, libcontainer.ErrNotExist):
		// Nothing recorded; a half-created state dir or cgroup may exist (crash inside Create).
		if err := removeCgroup(cgroupName(r.cfg.StateDir, id)); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(filepath.Join(r.cfg.StateDir, id)); err != nil {
			errs = append(errs, err)
		}
	default:
		// Unreadable state: drop it so a new Create can proceed.
		if err := removeCgroup(cgroupName(r.cfg.StateDir, id)); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(filepath.Join(r.cfg.StateDir, id)); err != nil {
			errs = append(errs, err)
		}
	}
	if rootfs != "" {
		// A spare's workspace slot first: an adopted workspace is mounted on it.
		if err := unmountAll(filepath.Join(filepath.Dir(rootfs), workspaceSlot)); err != nil {
			errs = append(errs, err)
		}
		if err := unmountAll(rootfs); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		for _, p := range []string{r.socketPath(id), r.rootfsRecord(id)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// stopContainer ends every process of c, politely first.
func stopContainer(ctx context.Context, c *libcontainer.Container, grace time.Duration) error {
	st, err := c.Status()
	if err != nil {
		return err
	}
	if st == libcontainer.Paused {
		_ = c.Resume()
	}
	initPid := 0
	var paths map[string]string
	if s, err := c.State(); err == nil {
		initPid, paths = s.InitProcessPid, s.CgroupPaths
	}
	if st != libcontainer.Stopped && grace > 0 {
		// The init ignores SIGTERM so the others get their grace; it goes with the SIGKILL.
		signalAll(c, unix.SIGTERM, initPid)
		deadline := time.Now().Add(grace)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			pids, err := c.Processes()
			if err != nil || len(pids) == 0 || (len(pids) == 1 && pids[0] == initPid) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if st != libcontainer.Stopped {
		// SIGKILL to the init of a PID namespace kills everything in it.
		if err := killInit(c, initPid); err != nil {
			return fmt.Errorf("kill init: %w", err)
		}
		// Every process has its SIGKILL and runs no more of its own code; what is left is the
		// kernel's exit of each, which the sandbox's CPU limit would throttle: 4,096 processes of
		// a fork bomb under --cpus 0.5 took 46 s to go.
		unthrottle(paths)
	}
	// Wait until the kernel has taken every process down, or the cgroup cannot be removed.
	return waitKilled(func() ([]int, bool, error) {
		st, _ := c.Status()
		pids, _ := c.Processes()
		return pids, st == libcontainer.Stopped && len(pids) == 0, nil
	})
}

// killInit sends SIGKILL to c's init, pid, through a pidfd it closes at once. (Container.Signal
// on a loaded container opens one with os.FindProcess and leaves it to the garbage collector,
// which kept a descriptor per stopped sandbox open in the daemon for minutes.) The pidfd is
// opened before the check that pid still is c's init, so a pid reused since is never hit.
func killInit(c *libcontainer.Container, pid int) error {
	if pid <= 0 {
		// No pid to hand: libcontainer finds it itself.
		if err := c.Signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
			return err
		}
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // gone already
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if st, err := c.Status(); err != nil || st == libcontainer.Stopped {
		return err // pid is no longer c's init
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// signalAll sends sig to every process in c's cgroup except skip.
func signalAll(c *libcontainer.Container, sig unix.Signal, skip int) {
	pids, _ := c.Processes()
	for _, pid := range pids {
		if pid != skip {
			_ = unix.Kill(pid, sig)
		}
	}
}

// Running reports whether the sandbox exists and its init answers.
func (r *Runtime) Running(id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return r.Probe(ctx, id) == Answering
}

// List returns the ids of every sandbox libcontainer has state for, running or not, and of
// every sandbox that only a cgroup of this runtime's is left of (its state was deleted while
// it ran), so a restarted daemon can reconcile them with its store and Stop the strays.
func (r *Runtime) List() ([]string, error) {
	ids, err := cgroupIDs(r.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && validID(e.Name()) == nil && fileExists(filepath.Join(r.cfg.StateDir, e.Name(), stateFile)) {
			ids = append(ids, e.Name())
		}
	}
	// A start cut short before its container existed leaves its rootfs record (and maybe its
	// socket) alone: the id is listed so that a Stop removes them.
	runFiles, err := os.ReadDir(r.cfg.RunDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	for _, e := range runFiles {
		id, ok := strings.CutSuffix(e.Name(), ".rootfs")
		if !ok {
			id, ok = strings.CutSuffix(e.Name(), ".sock")
		}
		if ok && validID(id) == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// enterLeafCgroup moves this process into a "sandboxd" child of its cgroup on cgroup v2, where
// a cgroup with processes cannot delegate controllers to children: libcontainer then puts each
// sandbox's relative cgroup next to that leaf, under the daemon's own cgroup. Best effort: if
// it fails, sandboxes land beside the daemon's cgroup instead (libcontainer's default).
func enterLeafCgroup() {
	if !cgroups.IsCgroup2UnifiedMode() {
		return
	}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return
	}
	defer f.Close()
	own := ""
	s := bufio.NewScanner(f)
	for s.Scan() {
		if p, ok := strings.CutPrefix(s.Text(), "0::"); ok {
			own = p
		}
	}
	if own == "" || own == "/" || filepath.Base(own) == "sandboxd" {
		return
	}
	leaf := filepath.Join("/sys/fs/cgroup", own, "sandboxd")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return
	}
	_ = os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
}
