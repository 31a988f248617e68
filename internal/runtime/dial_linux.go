//go:build linux

package runtime

import (
	"context"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"

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
// run); the caller closes it. It goes by the init's watch, kept since its start (or opened once
// from libcontainer's state after a daemon restart): decoding that state, some 30 KiB of JSON,
// at every call was a sixth of the CPU of a restart beside 100 sandboxes, and paid by every
// connection a port forward dials.
func (r *Runtime) NetNS(id string) (*os.File, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	w := r.watch(id)
	if w == nil {
		return nil, ErrNotRunning
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", w.pid))
	if err != nil {
		return nil, ErrNotRunning
	}
	// Checked after the open: the pidfd names the init itself, so an init that had exited
	// before it, leaving its pid to another process, shows here.
	if w.exited() {
		f.Close()
		return nil, ErrNotRunning
	}
	return f, nil
}
