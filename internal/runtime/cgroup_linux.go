//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"golang.org/x/sys/unix"
)

// cgroupManager returns the manager of the cgroup with the relative name, laid out as
// libcontainer lays out a container's: on v1 under the daemon's own cgroup of each controller,
// on v2 next to the daemon's leaf cgroup.
func cgroupManager(name string) (cgroups.Manager, error) {
	return manager.New(&cgroups.Cgroup{Path: name, Resources: &cgroups.Resources{}})
}

// cgroupIDs returns the ids of the sandboxes that have a cgroup of the runtime keeping its state
// in stateDir, in any controller, whether or not any state refers to them.
func cgroupIDs(stateDir string) ([]string, error) {
	prefix := CgroupPrefix(stateDir)
	// Any id will do: only the parent directories of its paths are read.
	m, err := cgroupManager(prefix + "probe")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	parents := map[string]bool{}
	for _, p := range m.GetPaths() {
		if p != "" {
			parents[filepath.Dir(p)] = true
		}
	}
	var ids []string
	for parent := range parents {
		entries, err := os.ReadDir(parent)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("cgroups: %w", err)
		}
		for _, e := range entries {
			if id, ok := strings.CutPrefix(e.Name(), prefix); ok && e.IsDir() && validID(id) == nil {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// unthrottle lifts the CPU limit of the cgroup at paths (libcontainer's, by controller; "" is
// cgroup v2's unified one). Best effort: a limit left only makes the processes' exit slower.
func unthrottle(paths map[string]string) {
	if p := paths[""]; p != "" {
		_ = os.WriteFile(filepath.Join(p, "cpu.max"), []byte("max"), 0)
	}
	if p := paths["cpu"]; p != "" {
		_ = os.WriteFile(filepath.Join(p, "cpu.cfs_quota_us"), []byte("-1"), 0)
	}
}

// removeCgroup removes a sandbox's cgroup that no container state refers to any more: every
// process left in it, in any controller, is killed and waited for, then the cgroup goes.
func removeCgroup(name string) error {
	m, err := cgroupManager(name)
	if err != nil {
		return err
	}
	paths := m.GetPaths()
	// A process frozen by the v1 freezer (a paused sandbox) only dies of SIGKILL once thawed.
	_ = m.Freeze(cgroups.Thawed)
	err = waitKilled(func() ([]int, bool, error) {
		pids, err := cgroupPids(paths)
		return pids, len(pids) == 0, err
	})
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", name, err)
	}
	if err := m.Destroy(); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", name, err)
	}
	return nil
}

// cgroupPids lists the processes in the cgroups at paths and below; paths that do not exist
// hold none.
func cgroupPids(paths map[string]string) ([]int, error) {
	var pids []int
	seen := map[string]bool{}
	for _, p := range paths {
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		got, err := cgroups.GetAllPids(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENODEV) {
				continue // never created in this controller, or removed under us
			}
			return nil, fmt.Errorf("cgroup %s: %w", p, err)
		}
		pids = append(pids, got...)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// memoryDir returns the directory of sandbox id's memory cgroup: the memory controller's on
// cgroup v1, the unified one on v2. Every sandbox's cgroup is a sibling of the others (see
// cgroupManager), so their parent is found once: a cgroup manager per call parses
// /proc/self/cgroup on cgroup v1, which made up a fifth of a list's cost.
func (r *Runtime) memoryDir(id string) (string, error) {
	r.memOnce.Do(func() {
		m, err := cgroupManager(cgroupName(r.cfg.StateDir, "memory"))
		if err != nil {
			r.memErr = err
			return
		}
		dir := m.Path("memory")
		if cgroups.IsCgroup2UnifiedMode() {
			dir = m.Path("")
		}
		r.memParent = filepath.Dir(dir)
	})
	if r.memErr != nil {
		return "", r.memErr
	}
	return filepath.Join(r.memParent, cgroupName(r.cfg.StateDir, id)), nil
}

// oomFile returns the file holding sandbox id's oom_kill counter.
func (r *Runtime) oomFile(id string) (string, error) {
	dir, err := r.memoryDir(id)
	if err != nil {
		return "", err
	}
	if cgroups.IsCgroup2UnifiedMode() {
		return filepath.Join(dir, "memory.events"), nil
	}
	return filepath.Join(dir, "memory.oom_control"), nil
}

// tcpLimitFile is cgroup v1's limit on a memory cgroup's TCP buffers. The kernel counts them
// only for a cgroup whose file was written once; until then they are charged to nobody.
const tcpLimitFile = "memory.kmem.tcp.limit_in_bytes"

// SocketMemoryLimit is the most a sandbox of memoryMB (0: no limit) may hold in TCP buffers on a
// cgroup v1 host; -1 is no limit. v1 counts them beside the memory limit rather than in it, so
// a quarter of the limit keeps a sandbox's memory and buffers together within 1.25 times its
// limit while leaving room for hundreds of busy connections (a socket's buffers autotune to a
// few MiB). On cgroup v2 the buffers are part of the memory the limit bounds.
func SocketMemoryLimit(memoryMB int) int64 {
	if memoryMB <= 0 {
		return -1
	}
	return int64(memoryMB) << 20 / 4
}

// chargeSockets makes the TCP buffers of sandbox id's processes count against it, so that a
// sandbox that fills socket buffers runs out of its own share before the host's tcp_mem is
// under pressure (when the gateway, the API and SSH would fail to allocate). On cgroup v2 the
// kernel does so by itself (see SocketAccounting); on v1 the limit is written once the cgroup
// exists, before any process of the sandbox can open a socket.
func (r *Runtime) chargeSockets(id string, memoryMB int) error {
	if cgroups.IsCgroup2UnifiedMode() {
		return nil
	}
	dir, err := r.memoryDir(id)
	if err != nil {
		return err
	}
	limit := strconv.FormatInt(SocketMemoryLimit(memoryMB), 10)
	if err := os.WriteFile(filepath.Join(dir, tcpLimitFile), []byte(limit), 0); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // a kernel without v1 socket accounting: SocketAccounting says so at start
		}
		return fmt.Errorf("limit the TCP buffers of %s: %w", id, err)
	}
	return nil
}

// SocketAccounting reports whether this host charges a sandbox's TCP buffers to it, and if not,
// why: cgroup v1 needs the kernel's memory.kmem.tcp files, v2 must not have been booted with
// cgroup.memory=nosocket.
func SocketAccounting() error {
	if cgroups.IsCgroup2UnifiedMode() {
		cmdline, err := os.ReadFile("/proc/cmdline")
		if err != nil {
			return err
		}
		return socketAccountingV2(string(cmdline))
	}
	mnt, err := cgroups.FindCgroupMountpoint("", "memory")
	if err != nil {
		return fmt.Errorf("no memory cgroup: %w", err)
	}
	if !fileExists(filepath.Join(mnt, tcpLimitFile)) {
		return fmt.Errorf("the kernel has no %s (cgroup v1 without kernel memory accounting): a sandbox's TCP buffers are charged to nobody", tcpLimitFile)
	}
	return nil
}

// socketAccountingV2 is SocketAccounting's rule on cgroup v2, for the kernel command line.
func socketAccountingV2(cmdline string) error {
	for _, arg := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(arg, "cgroup.memory="); ok && slices.Contains(strings.Split(v, ","), "nosocket") {
			return errors.New("the kernel was booted with cgroup.memory=nosocket: a sandbox's TCP buffers are charged to nobody")
		}
	}
	return nil
}

// OOMKills returns how many processes of sandbox id the kernel has killed for its memory limit
// since the sandbox started (its cgroup's oom_kill counter: memory.events on cgroup v2,
// memory.oom_control on v1).
func (r *Runtime) OOMKills(id string) (uint64, error) {
	if err := validID(id); err != nil {
		return 0, err
	}
	f, err := r.oomCounter(id)
	if err != nil {
		return 0, err
	}
	// The kernel writes the file afresh for a read from its start.
	var buf [512]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("runtime: oom kills of %s: %w", id, err)
	}
	for line := range strings.Lines(string(buf[:n])) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			var n uint64
			if _, err := fmt.Sscan(v, &n); err != nil {
				return 0, fmt.Errorf("runtime: oom kills of %s: %q: %w", id, line, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("runtime: oom kills of %s: no oom_kill in %s (a kernel before 4.13?)", id, f.Name())
}

// oomCounter returns sandbox id's oom_kill counter file (see oomFile), opened at its first read
// and kept open until the sandbox stops (forget): a list reads every sandbox's, and opening
// and closing the file was a third of the daemon's CPU in a list of 1,000 sandboxes.
func (r *Runtime) oomCounter(id string) (*os.File, error) {
	if f, ok := r.oomFiles.Load(id); ok {
		return f.(*os.File), nil
	}
	path, err := r.oomFile(id)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("runtime: oom kills of %s: %w", id, err)
	}
	if prev, loaded := r.oomFiles.LoadOrStore(id, f); loaded {
		f.Close()
		return prev.(*os.File), nil
	}
	return f, nil
}

// killStall is how long waitKilled waits with no process going before it gives up. A fork
// bomb's thousands of processes take seconds to go where page tables are dear (a paravirtualised
// guest took over 10 s for 4,096), so no fixed deadline fits them all.
const killStall = 10 * time.Second

// waitKilled waits until alive says done, SIGKILLing every process it reports between its
// calls (processes that escaped the PID namespace's kill, if any), and gives up once killStall
// passes without one of them going.
func waitKilled(alive func() (pids []int, done bool, err error)) error {
	left, progress, pause := -1, time.Now(), time.Millisecond
	for {
		pids, done, err := alive()
		if err != nil || done {
			return err
		}
		if left < 0 || len(pids) < left {
			left, progress = len(pids), time.Now()
		}
		if time.Since(progress) > killStall {
			return fmt.Errorf("%d processes still running after SIGKILL, none gone for %s: %v", len(pids), killStall, pids[:min(len(pids), 20)])
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
