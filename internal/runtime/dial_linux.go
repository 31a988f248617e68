//go:build linux

package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// DialLoopback connects to addr on the loopback interface of the running sandbox id, from
// inside its network namespace: "127.0.0.1:PORT", "[::1]:PORT" or "localhost:PORT" (tried
// as 127.0.0.1, then ::1). The host's own loopback is never reached. The returned connection
// is an ordinary TCP socket of this process that stays in the sandbox's namespace.
func (r *Runtime) DialLoopback(ctx context.Context, id, addr string) (net.Conn, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	targets, err := loopbackTargets(addr)
	if err != nil {
		return nil, err
	}
	ns, err := r.NetNS(id)
	if err != nil {
		return nil, err
	}
	defer ns.Close()

	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: when this goroutine ends, Go ends its thread, and the thread's
		// namespace change with it. No other goroutine ever runs in the sandbox's namespace.
		goruntime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("runtime: dial %s: join network namespace: %w", addr, os.NewSyscallError("setns", err))}
			return
		}
		var d net.Dialer
		var conn net.Conn
		var err error
		for _, t := range targets {
			if conn, err = d.DialContext(ctx, "tcp", t); err == nil || ctx.Err() != nil {
				break
			}
		}
		done <- result{conn, err}
	}()
	res := <-done
	return res.conn, res.err
}

// loopbackTargets returns the literal addresses addr stands for, or an error if it is not a
// loopback address of the accepted forms.
func loopbackTargets(addr string) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("runtime: dial: invalid address %q: want 127.0.0.1:PORT, [::1]:PORT or localhost:PORT", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("runtime: dial: invalid port in %q: want 1-65535", addr)
	}
	switch host {
	case "127.0.0.1", "::1":
		return []string{net.JoinHostPort(host, port)}, nil
	case "localhost":
		return []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)}, nil
	}
	return nil, fmt.Errorf("runtime: dial: %q is not a sandbox loopback address: want 127.0.0.1:PORT, [::1]:PORT or localhost:PORT", addr)
}

// NetNS opens the network namespace of the running sandbox id (ErrNotRunning when it does not
// run); the caller closes it.
func (r *Runtime) NetNS(id string) (*os.File, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	c, err := libcontainer.Load(r.cfg.StateDir, id)
	if err != nil {
		if errors.Is(err, libcontainer.ErrNotExist) {
			return nil, ErrNotRunning
		}
		return nil, fmt.Errorf("runtime: open network namespace of %s: %w", id, err)
	}
	st, err := c.State()
	if err != nil || st.InitProcessPid == 0 {
		return nil, ErrNotRunning
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", st.InitProcessPid))
	if err != nil {
		return nil, ErrNotRunning
	}
	// Checked after the open: libcontainer compares the pid's start time with its state, so a
	// recycled pid cannot have handed us another process's namespace.
	if s, err := c.Status(); err != nil || s != libcontainer.Running {
		f.Close()
		return nil, ErrNotRunning
	}
	return f, nil
}
