//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// oomFile returns the file holding sandbox id's oom_kill counter. Every sandbox's cgroup is a
// sibling of the others (see cgroupManager), so their parent is found once: a cgroup manager
// per call parses /proc/self/cgroup on cgroup v1, which made up a fifth of a list's cost.
func (r *Runtime) oomFile(id string) (string, error) {
	r.oomOnce.Do(func() {
		name := cgroupName(r.cfg.StateDir, "oom")
		m, err := cgroupManager(name)
		if err != nil {
			r.oomErr = err
			return
		}
		dir, base := m.Path("memory"), "memory.oom_control"
		if cgroups.IsCgroup2UnifiedMode() {
			dir, base = m.Path(""), "memory.events"
		}
		r.oomParent, r.oomBase = filepath.Dir(dir), base
	})
	if r.oomErr != nil {
		return "", r.oomErr
	}
	return filepath.Join(r.oomParent, cgroupName(r.cfg.StateDir, id), r.oomBase), nil
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
