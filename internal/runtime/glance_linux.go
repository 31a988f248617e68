//go:build linux

package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/runtime/initproc"
)

// Glance says what sandbox id's init is doing without waking it, as a list of many sandboxes
// needs: Gone once it has exited (its pidfd says so) or nothing of it is known, Unresponsive
// while it is stopped (SIGSTOP, a debugger) or while the last Probe of it timed out and none
// has answered since, Answering otherwise. Unlike Probe it costs the init nothing: a list of
// 1,000 sandboxes that pinged each init had every one of them scheduled to answer. A sandbox
// starved by its own processes looks Answering here until a Probe finds out.
func (r *Runtime) Glance(id string) Liveness {
	if validID(id) != nil {
		return Gone
	}
	w := r.watch(id)
	switch {
	case w == nil || w.exited():
		return Gone
	case w.silent.Load() || w.stopped():
		return Unresponsive
	}
	return Answering
}

// initWatch is what the runtime keeps of a running init to glance at it: a pidfd, which
// cannot come to name another process, and its pid, for /proc.
type initWatch struct {
	pid    int
	pidfd  *os.File
	silent atomic.Bool // the last Probe timed out
	// reaping: the init is this process's child, and reap closes pidfd once it reaped it.
	reaping bool
}

// watch returns sandbox id's initWatch, opening it the first time from libcontainer's state
// (an init started by an earlier daemon), or nil when the sandbox has no live init.
func (r *Runtime) watch(id string) *initWatch {
	if w, ok := r.inits.Load(id); ok {
		return w.(*initWatch)
	}
	pid, started, ok := r.recordedInit(id)
	if !ok {
		return nil
	}
	w, err := openWatch(pid, started)
	if err != nil {
		return nil
	}
	if prev, loaded := r.inits.LoadOrStore(id, w); loaded {
		w.pidfd.Close()
		return prev.(*initWatch)
	}
	return w
}

// recordedInit reads the pid and start time of sandbox id's init from libcontainer's state
// file, decoding those two fields only: the file is some 30 KiB, most of it the seccomp filter,
// and decoding all of it (libcontainer.Load) for each sandbox was a sixth of sandboxd's CPU in a
// restart beside 100 of them. A file without them (another runc's layout) is loaded whole.
func (r *Runtime) recordedInit(id string) (pid int, started uint64, ok bool) {
	b, err := os.ReadFile(filepath.Join(r.cfg.StateDir, id, stateFile))
	if err != nil {
		return 0, 0, false
	}
	if pid, started, ok := initFields(b); ok {
		return pid, started, true
	}
	c, err := libcontainer.Load(r.cfg.StateDir, id)
	if err != nil {
		return 0, 0, false
	}
	full, err := c.State()
	if err != nil || full.InitProcessPid <= 0 {
		return 0, 0, false
	}
	return full.InitProcessPid, full.InitProcessStartTime, true
}

// initFields decodes the init's pid and start time from the state file b, skipping the rest.
func initFields(b []byte) (pid int, started uint64, ok bool) {
	var st struct {
		Pid     int    `json:"init_process_pid"`
		Started uint64 `json:"init_process_start"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Pid <= 0 || st.Started == 0 {
		return 0, 0, false
	}
	return st.Pid, st.Started, true
}

// watchStarted keeps and returns the watch of the init p this runtime just started, or nil
// (then watch opens one from libcontainer's state when it is first needed).
func (r *Runtime) watchStarted(id string, p *libcontainer.Process) *initWatch {
	pid, err := p.Pid()
	if err != nil {
		return nil
	}
	w, err := openWatch(pid, 0)
	if err != nil {
		return nil
	}
	w.reaping = true
	if prev, loaded := r.inits.Swap(id, w); loaded {
		prev.(*initWatch).close()
	}
	return w
}

// forget drops what the runtime keeps open of sandbox id (its init's watch, its oom_kill
// counter): it is being stopped, or replaced.
func (r *Runtime) forget(id string) {
	if w, ok := r.inits.LoadAndDelete(id); ok {
		w.(*initWatch).close()
	}
	if f, ok := r.oomFiles.LoadAndDelete(id); ok {
		f.(*os.File).Close()
	}
}

// close closes the pidfd unless reap owns it.
func (w *initWatch) close() {
	if !w.reaping {
		w.pidfd.Close()
	}
}

// reap waits for the init, this process's child, to exit and reaps it, then closes the pidfd.
// It waits in Go's poller, not in wait4, which holds an OS thread for the sandbox's whole life
// (200 sandboxes: 208 threads in sandboxd). It needs nothing of libcontainer's: the started
// process's state (the container's config, with its seccomp filter, and its cgroup manager)
// is left to the garbage collector, not kept for every running sandbox.
func (w *initWatch) reap() {
	defer w.pidfd.Close()
	rc, err := w.pidfd.SyscallConn()
	if err != nil {
		return
	}
	// Readable once the process has exited.
	_ = rc.Read(func(fd uintptr) bool {
		n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0
	})
	_ = rc.Control(func(fd uintptr) {
		for {
			err := unix.Waitid(unix.P_PIDFD, int(fd), nil, unix.WEXITED, nil)
			if err != unix.EINTR {
				return
			}
		}
	})
}

// noteProbe keeps what a Probe found for Glance.
func (r *Runtime) noteProbe(id string, l Liveness) {
	if l == Gone {
		return
	}
	if w := r.watch(id); w != nil {
		w.silent.Store(l == Unresponsive)
	}
}

// openWatch opens a pidfd for pid and, when startTime is not 0, checks that pid is still the
// process that started then (libcontainer's record of it), not a later one with its number.
func openWatch(pid int, startTime uint64) (*initWatch, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	w := &initWatch{pid: pid, pidfd: os.NewFile(uintptr(fd), "pidfd")}
	if startTime != 0 {
		if _, started, err := procStat(pid); err != nil || started != startTime {
			w.pidfd.Close()
			return nil, fmt.Errorf("process %d is not the init that started at %d", pid, startTime)
		}
	}
	return w, nil
}

// exited reports whether the init has exited; a pidfd is readable from then on. A closed
// pidfd (the runtime forgot the sandbox meanwhile) counts as exited.
func (w *initWatch) exited() bool {
	rc, err := w.pidfd.SyscallConn()
	if err != nil {
		return true
	}
	gone := true
	if err := rc.Control(func(fd uintptr) {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		for err == unix.EINTR { // Go's preemption signal, not an answer
			n, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		}
		gone = err != nil || n > 0
	}); err != nil {
		return true
	}
	return gone
}

// stopped reports whether the init is stopped by a signal or a tracer.
func (w *initWatch) stopped() bool {
	state, _, err := procStat(w.pid)
	return err == nil && (state == 'T' || state == 't')
}

// procStat reads the state and the start time (in clock ticks since boot) of process pid from
// /proc/PID/stat.
func procStat(pid int) (state byte, startTime uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	f := initproc.StatFields(b)
	// The state is field 3 of the line, the start time field 22.
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	startTime, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return f[0][0], startTime, nil
}
