package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// PortSpec is one forward of `hiloop sandbox port-forward`: connections to Addr:LocalPort on
// this machine go to Port on the sandbox's loopback.
type PortSpec struct {
	// Addr is the local address to listen on; empty listens on both 127.0.0.1 and ::1.
	Addr string
	// LocalPort is the local port; 0 lets the system pick one (printed).
	LocalPort int
	// Port is the port in the sandbox.
	Port int
}

// SandboxPortForwardOptions are the arguments of `hiloop sandbox port-forward`.
type SandboxPortForwardOptions struct {
	Name  string
	Ports []PortSpec
}

func newCmdSandboxPortForward(f *Factory, runF func(*SandboxPortForwardOptions) error) *cobra.Command {
	opts := &SandboxPortForwardOptions{}
	cmd := &cobra.Command{
		Use:   "port-forward NAME [LOCAL_ADDR:]LOCAL_PORT:PORT...",
		Short: "Forward local ports to ports on a sandbox's loopback, through the daemon (no SSH)",
		Long: `Listen on local ports and carry each connection to a port on the sandbox's loopback
(127.0.0.1, then ::1), through sandboxd's API: over the unix socket, or over a remote's TLS.
It runs until Ctrl-C.

Each forward is LOCAL_PORT:PORT (LOCAL_PORT 0 picks a free one), PORT alone (the same port on
both sides), or LOCAL_ADDR:LOCAL_PORT:PORT to listen on another address ([::1] in brackets).
Without LOCAL_ADDR it listens on 127.0.0.1 and ::1. A connection to a port nothing listens on
in the sandbox is closed at once, and the reason printed.`,
		Example: `  hiloop sandbox port-forward web 8080:80
  hiloop sandbox port-forward web 3000 5432:5432
  hiloop sandbox port-forward web 0:8080          # a free local port, printed
  hiloop sandbox port-forward web '[::1]:9000:9000'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return &usageError{errors.New("port-forward takes a sandbox NAME and at least one [LOCAL_ADDR:]LOCAL_PORT:PORT")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			opts.Ports = nil
			for _, a := range args[1:] {
				spec, err := parsePortSpec(a)
				if err != nil {
					return &usageError{err}
				}
				opts.Ports = append(opts.Ports, spec)
			}
			return runCommand(cmd, f, opts, runF, sandboxPortForwardRun)
		},
	}
	return cmd
}

// parsePortSpec reads [LOCAL_ADDR:]LOCAL_PORT:PORT, or PORT alone.
func parsePortSpec(s string) (PortSpec, error) {
	bad := func(why string) (PortSpec, error) {
		return PortSpec{}, fmt.Errorf("invalid forward %q: %s; use [LOCAL_ADDR:]LOCAL_PORT:PORT, e.g. 8080:80", s, why)
	}
	rest, remote, found := cutLast(s, ":")
	if !found {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			return bad("the port is not 1 to 65535")
		}
		return PortSpec{LocalPort: p, Port: p}, nil
	}
	port, err := strconv.Atoi(remote)
	if err != nil || port < 1 || port > 65535 {
		return bad("the sandbox's port is not 1 to 65535")
	}
	addr, local, found := cutLast(rest, ":")
	if !found {
		addr, local = "", rest
	} else {
		addr = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
		if net.ParseIP(addr) == nil && addr != "localhost" {
			return bad("the local address is not an IP address")
		}
	}
	lp, err := strconv.Atoi(local)
	if err != nil || lp < 0 || lp > 65535 {
		return bad("the local port is not 0 to 65535")
	}
	return PortSpec{Addr: addr, LocalPort: lp, Port: port}, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func sandboxPortForwardRun(ctx context.Context, f *Factory, opts *SandboxPortForwardOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	// A stopped or missing sandbox is said now, not at the first connection.
	if sb, err := c.GetSandbox(ctx, opts.Name); err != nil {
		return err
	} else if sb.State != api.StateRunning {
		return api.Errorf(api.CodeSandboxNotRunning, "sandbox %q is %s: start it with `hiloop sandbox start %s`", opts.Name, sb.State, opts.Name)
	}
	ctx, stop := followContext(ctx, true)
	defer stop()
	type forward struct {
		ln   net.Listener
		port int
	}
	var forwards []forward
	defer func() {
		for _, fw := range forwards {
			fw.ln.Close()
		}
	}()
	for _, spec := range opts.Ports {
		lns, err := listenLocal(spec)
		if err != nil {
			return err
		}
		for _, ln := range lns {
			forwards = append(forwards, forward{ln, spec.Port})
			fmt.Fprintf(f.IO.Out, "Forwarding from %s -> %d\n", ln.Addr(), spec.Port)
		}
	}
	var wg sync.WaitGroup
	for _, fw := range forwards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveForward(ctx, f, c, opts.Name, fw.ln, fw.port)
		}()
	}
	<-ctx.Done()
	for _, fw := range forwards {
		fw.ln.Close()
	}
	wg.Wait()
	return nil
}

// listenLocal opens the local listeners of one forward: on its address, or on 127.0.0.1 and ::1
// (the same port on both; ::1 is skipped where the host has no IPv6).
func listenLocal(spec PortSpec) ([]net.Listener, error) {
	if spec.Addr != "" {
		ln, err := net.Listen("tcp", net.JoinHostPort(spec.Addr, strconv.Itoa(spec.LocalPort)))
		if err != nil {
			return nil, fmt.Errorf("listen for the forward to %d: %w", spec.Port, err)
		}
		return []net.Listener{ln}, nil
	}
	v4, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(spec.LocalPort)))
	if err != nil {
		return nil, fmt.Errorf("listen for the forward to %d: %w", spec.Port, err)
	}
	port := v4.Addr().(*net.TCPAddr).Port
	v6, err := net.Listen("tcp", net.JoinHostPort("::1", strconv.Itoa(port)))
	if err != nil {
		return []net.Listener{v4}, nil // no IPv6 loopback here
	}
	return []net.Listener{v4, v6}, nil
}

// serveForward carries each connection ln accepts to port in the sandbox until ln is closed.
// On the unix socket the daemon takes each connection itself (pkg/api's port handoff), so its
// bytes go from this machine's client to the sandbox without passing through this process.
func serveForward(ctx context.Context, f *Factory, c *client.Client, name string, ln net.Listener, port int) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		local, err := ln.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			if _, err := c.ForwardPort(ctx, name, port, local); err != nil && ctx.Err() == nil {
				fmt.Fprintf(f.IO.ErrOut, "%s forward %s -> %d: %v\n", f.IO.StylesStderr().Error.Render("hiloop:"), ln.Addr(), port, err)
			}
		}()
	}
}
