package k8stest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one control-plane binary the cluster runs. It can be started again after it was
// stopped (the API server is, to test clients against an API server that is down).
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd has been waited for
	waitErr  error
	stopping bool  // an exit now is asked for, not a crash
	crashed  error // set when the process exited without being asked to
}

// start runs the process with its output appended to its log file. The process gets SIGKILL
// when the test binary dies (a timeout panic runs no cleanups), so none outlives its test.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done: // it exited on its own: start it again
		default:
			return fmt.Errorf("%s is already running", p.name)
		}
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "=== %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(append([]string{p.path}, p.args...), " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.done, p.stopping = cmd, make(chan struct{}), false
	go func(done chan struct{}) {
		err := cmd.Wait()
		log.Close()
		p.mu.Lock()
		p.waitErr = err
		if !p.stopping && p.crashed == nil {
			p.crashed = fmt.Errorf("%s exited on its own: %v", p.name, exitText(err))
		}
		p.mu.Unlock()
		close(done)
	}(p.done)
	return nil
}

// exited is closed when the running process has exited; nil when none was started.
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the process to be gone. Stopping a
// process that is not running is a no-op.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.stopping = true
	p.mu.Unlock()

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	p.mu.Lock()
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
}

// crash is why the process exited without being asked to, or nil.
func (p *process) crash() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashed
}

// waitReady polls ready every pollInterval until it returns nil, the process exits, or ctx ends;
// the error then says which, with the last reason ready gave.
func (p *process) waitReady(ctx context.Context, ready func(context.Context) error) error {
	exited := p.exited()
	if exited == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = ready(attempt)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			p.mu.Lock()
			err := p.waitErr
			p.mu.Unlock()
			return fmt.Errorf("%s exited before it was ready: %v", p.name, exitText(err))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %v)", p.name, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// pollInterval is how often readiness is polled.
const pollInterval = 100 * time.Millisecond

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// tail is the last n lines of the process's log.
func (p *process) tail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// portInUse reports whether the process's log, since offset, says it could not bind a port: the
// free port picked for it was taken in between, and a new one is worth a try.
func (p *process) portInUse(offset int64) bool {
	f, err := os.Open(p.logPath)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return false
	}
	b, _ := io.ReadAll(f)
	return bytes.Contains(b, []byte("address already in use"))
}

// logSize is the log's current size, for portInUse.
func (p *process) logSize() int64 {
	st, err := os.Stat(p.logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// rss is the process's resident set size in bytes (from /proc), 0 when it is not running.
func (p *process) rss() int64 {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// freePort is a TCP port on 127.0.0.1 that nothing listens on now. Another process may take it
// before the one it is meant for binds it; start retries with new ports when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
