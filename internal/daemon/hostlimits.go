//go:build linux

package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// hostLimits is the one place sandboxd touches the host's kernel limits. Some kernel pools are
// host-wide whatever the namespaces (pids and threads, pseudo-terminals, aio events): at start
// it raises the sysctls that bound them to where the sandboxes' own limits bind first, and it
// admits each sandbox start only while the running sandboxes' shares and a reserve for the host
// fit under them (sandbox.HostBudget). docs/operations.md lists what it changes and why.
type hostLimits struct {
	proc string // "/proc" where empty, or a test's stand-in
	log  *slog.Logger
}

func (h hostLimits) path(name string) string {
	if h.proc == "" {
		return filepath.Join("/proc", name)
	}
	return filepath.Join(h.proc, name)
}

// What sandboxd raises the host-wide limits to, and what it keeps for the host.
const (
	// pidMaxTarget is the largest pid_max of a 64-bit kernel (PID_MAX_LIMIT), what systemd sets
	// by default; threads-max is raised to it too, as every thread takes a pid. A sandbox's
	// threads are held to runtime.PidsPerSandbox by its pids cgroup and their kernel stacks are
	// charged to its memory cgroup, so the host-wide ceiling need not hold them back.
	pidMaxTarget = 4194304
	// ptyMaxTarget is NR_UNIX98_PTY_MAX, the most pseudo-terminals the kernel can number; each
	// sandbox's own devpts instance holds it to runtime.PtysPerSandbox.
	ptyMaxTarget = 1048576
	// aioBytesPerEvent is the least ring memory an aio event counted against fs.aio-max-nr
	// takes: an io_event is 32 bytes and the kernel doubles the ring. The ring's pages are
	// charged to the memory cgroup of the process that made it, so with fs.aio-max-nr at the
	// host's memory over this, the count cannot run out before memory does, and a sandbox's
	// memory limit bounds what it takes.
	aioBytesPerEvent = 64
	// hostPidsReserve is what the sum of the running sandboxes' pids limits leaves of pid_max
	// and threads-max for everything else on the host: half the kernel's default pid_max.
	hostPidsReserve = 16384
	// hostPtysReserve is what the sandboxes' ptys leave the host beyond kernel.pty.reserve
	// (which keeps ptys for the host's own devpts instance only once the others are taken).
	hostPtysReserve = 1024
)

// sysctl is one host limit sandboxd raises: its path under /proc/sys and the value it wants.
type sysctl struct {
	path   string
	target uint64
}

// name is the sysctl's dotted name, e.g. kernel.pid_max.
func (s sysctl) name() string { return strings.ReplaceAll(s.path, "/", ".") }

// raises are the sysctls sandboxd raises at start, given the host's memory in bytes.
func raises(memTotal uint64) []sysctl {
	return []sysctl{
		{"kernel/pid_max", pidMaxTarget},
		{"kernel/threads-max", pidMaxTarget},
		{"kernel/pty/max", ptyMaxTarget},
		{"fs/aio-max-nr", memTotal / aioBytesPerEvent},
	}
}

// raise raises each host limit that is below what sandboxd needs, once at start, and logs the
// value before and after; a limit that cannot be read or written is left as it is, with a
// warning (admission then holds the sandboxes to it). It never lowers a limit.
func (h hostLimits) raise() {
	mem, err := h.memTotal()
	if err != nil {
		h.log.Warn("host memory unknown: fs.aio-max-nr left as it is", "err", err)
	}
	for _, s := range raises(mem) {
		before, err := h.read(s.path)
		if err != nil {
			h.log.Warn("cannot read a host limit: left as it is", "sysctl", s.name(), "err", err)
			continue
		}
		if before >= s.target {
			continue
		}
		if err := h.write(s.path, s.target); err != nil {
			h.log.Warn("cannot raise a host limit: sandboxes are admitted against it as it is", "sysctl", s.name(), "value", before, "wanted", s.target, "err", err)
			continue
		}
		after, err := h.read(s.path) // the kernel may clamp what it was given
		if err != nil {
			h.log.Warn("cannot read a host limit back", "sysctl", s.name(), "err", err)
			continue
		}
		h.log.Info("raised a host limit", "sysctl", s.name(), "before", before, "after", after)
	}
}

// pool is a host-wide kernel pool every running sandbox takes a share of.
type pool struct {
	path     string // under /proc/sys: the pool's size
	what     string // what a share counts, e.g. "pids"
	share    uint64 // each running sandbox's
	reserve  uint64 // kept for the host
	reserved string // a sysctl whose value is kept for the host as well, or ""
}

var pools = []pool{
	{path: "kernel/pid_max", what: "pids", share: runtime.PidsPerSandbox, reserve: hostPidsReserve},
	{path: "kernel/threads-max", what: "threads", share: runtime.PidsPerSandbox, reserve: hostPidsReserve},
	// Ptys of devpts instances other than the host's own cannot use kernel.pty.reserve.
	{path: "kernel/pty/max", what: "ptys", share: runtime.PtysPerSandbox, reserve: hostPtysReserve, reserved: "kernel/pty/reserve"},
}

// sandboxRoom is how many sandboxes of share each fit in a pool of size with reserve kept.
func sandboxRoom(size, reserve, share uint64) uint64 {
	if share == 0 {
		return ^uint64(0)
	}
	if size <= reserve {
		return 0
	}
	return (size - reserve) / share
}

// tightest is the pool with room for the fewest running sandboxes as the host's limits are now:
// that room, the pool's size and what is kept of it for the host. ok is false when no pool's
// size can be read.
func (h hostLimits) tightest() (room uint64, p pool, size, reserve uint64, ok bool) {
	for _, q := range pools {
		qsize, err := h.read(q.path)
		if err != nil {
			continue
		}
		qreserve := q.reserve
		if q.reserved != "" {
			if r, err := h.read(q.reserved); err == nil {
				qreserve += r
			}
		}
		if qroom := sandboxRoom(qsize, qreserve, q.share); !ok || qroom < room {
			room, p, size, reserve, ok = qroom, q, qsize, qreserve, true
		}
	}
	return room, p, size, reserve, ok
}

// logRoom says at start how many sandboxes the host's limits let run at once, and which binds.
func (h hostLimits) logRoom() {
	if room, p, _, _, ok := h.tightest(); ok {
		h.log.Info("host limits admit running sandboxes", "max_running", room, "bound_by", sysctl{path: p.path}.name())
	}
}

// AdmitStart admits one more running sandbox beside running others, or refuses with
// host_limit_reached naming the pool that has no room. The limits are read afresh, so an
// operator who raises one need not restart sandboxd; one that cannot be read admits.
func (h hostLimits) AdmitStart(running int) error {
	room, p, size, reserve, ok := h.tightest()
	if !ok || uint64(running) < room {
		return nil
	}
	name := sysctl{path: p.path}.name()
	return api.Errorf(api.CodeHostLimitReached,
		"the host's %s of %d has room for %d running sandboxes (%d %s each, %d kept for the host) and %d run: stop a sandbox, or raise %s",
		name, size, room, p.share, p.what, reserve, running, name)
}

func (h hostLimits) read(path string) (uint64, error) {
	b, err := os.ReadFile(h.path(filepath.Join("sys", path)))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

func (h hostLimits) write(path string, v uint64) error {
	f, err := os.OpenFile(h.path(filepath.Join("sys", path)), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.FormatUint(v, 10))
	return errors.Join(err, f.Close())
}

// memTotal is the host's memory in bytes (MemTotal of /proc/meminfo).
func (h hostLimits) memTotal() (uint64, error) {
	f, err := os.Open(h.path("meminfo"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("meminfo: MemTotal %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("meminfo: no MemTotal")
}

// fitHost holds a create request to what the host has, adding to ps a CPU or memory limit above
// the host's, naming the host's figure; a default the host cannot give (the request left the
// field out) becomes the host's. A field ps has refused already is left alone.
func (h hostLimits) fitHost(p *api.SandboxesPost, defaultCPUs, defaultMemory bool, ps *api.Problems) {
	mem, err := h.memTotal()
	if err != nil {
		ps.Add("", fmt.Errorf("host memory: %w", err))
		return
	}
	fitResources(p, float64(goruntime.NumCPU()), int(mem>>20), defaultCPUs, defaultMemory, ps)
}

// fitResources is fitHost's rule for a host of cpus cores and memMiB of memory.
func fitResources(p *api.SandboxesPost, cpus float64, memMiB int, defaultCPUs, defaultMemory bool, ps *api.Problems) {
	fitLimit(ps, &p.CPUs, cpus, defaultCPUs, "cpus", "CPUs", api.MinCPUs)
	fitLimit(ps, &p.MemoryMB, memMiB, defaultMemory, "memory_mb", "MiB of memory", api.MinMemoryMB)
}

// fitLimit holds the limit *v to the host's figure: a default above it becomes it, a value asked
// for above it is a problem of field.
func fitLimit[T int | float64](ps *api.Problems, v *T, host T, isDefault bool, field, unit string, least T) {
	switch {
	case ps.Has(field), *v <= host:
	case isDefault:
		*v = host
	default:
		ps.Addf(field, api.CodeInvalidArgument, "invalid %s %v: this host has %v %s: use %v to %v", field, *v, host, unit, least, host)
	}
}
