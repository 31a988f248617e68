package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hiloop/hiloop/pkg/client"
)

// Daemon is a private sandboxd the soak starts, kills and restarts on its own data dir and
// socket.
type Daemon struct {
	// Command is the program and leading arguments that run sandboxd, e.g. ["bin/sandboxd"];
	// the data dir, socket, images dir and init path flags are appended.
	Command []string
	// Env is added to the daemon's environment.
	Env []string
	// Dir holds the data dir (Dir/d), the socket (Dir/s.sock) and the log (Dir/sandboxd.log);
	// keep it short, a unix socket path is at most 107 bytes.
	Dir string
	// ImagesDir holds the built test image; InitPath is hiloop-init (hiloop-fake-agent next
	// to it).
	ImagesDir, InitPath string
	// NoFile, if not 0, is the daemon's descriptor limit (soft and hard), set with prlimit(1).
	NoFile int

	cmd    *exec.Cmd
	exited chan struct{}
}

// DataDir is the daemon's --data-dir.
func (d *Daemon) DataDir() string { return filepath.Join(d.Dir, "d") }

// Socket is the daemon's unix socket.
func (d *Daemon) Socket() string { return filepath.Join(d.Dir, "s.sock") }

// LogPath is where the daemon's output goes, appended to across restarts.
func (d *Daemon) LogPath() string { return filepath.Join(d.Dir, "sandboxd.log") }

// Host is the daemon's address for pkg/client.
func (d *Daemon) Host() string { return "unix://" + d.Socket() }

// Pid is the running daemon's process id (0 if none).
func (d *Daemon) Pid() int {
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Start starts the daemon and waits until it answers (it has reconciled by then), at most
// until ctx ends.
func (d *Daemon) Start(ctx context.Context) error {
	if d.cmd != nil {
		return errors.New("sandboxd already runs")
	}
	log, err := os.OpenFile(d.LogPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	argv := append([]string{}, d.Command...)
	if d.NoFile > 0 {
		// prlimit execs the daemon: the pid stays the daemon's.
		n := strconv.Itoa(d.NoFile)
		argv = append([]string{"prlimit", "--nofile=" + n + ":" + n, "--"}, argv...)
	}
	argv = append(argv, "--data-dir", d.DataDir(), "--socket", d.Socket(), "--images-dir", d.ImagesDir,
		"--init-path", d.InitPath, "--log-level", "info",
		// The soak's sandboxes and forks promise more than a test machine's disk; the budget is
		// storage_budget.txtar's to test.
		"--overcommit", "100")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), d.Env...)
	if err := cmd.Start(); err != nil {
		return err
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) { _ = cmd.Wait(); close(exited) }(d.exited)
	c, err := client.New(d.Host(), "")
	if err != nil {
		return err
	}
	for {
		vctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Version(vctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-d.exited:
			d.cmd = nil
			return fmt.Errorf("sandboxd exited at start: %v (log: %s)", cmd.ProcessState, d.LogPath())
		case <-ctx.Done():
			return fmt.Errorf("sandboxd did not come up: %v (log: %s)", err, d.LogPath())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill kills the daemon with SIGKILL and waits until it is gone; its sandboxes run on.
func (d *Daemon) Kill() { d.signal(syscall.SIGKILL) }

// Stop stops the daemon with SIGTERM, as an operator would, and waits until it has exited.
func (d *Daemon) Stop() { d.signal(syscall.SIGTERM) }

func (d *Daemon) signal(sig syscall.Signal) {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	<-d.exited
	d.cmd = nil
}
