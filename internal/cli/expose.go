package cli

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
)

// SandboxExposeOptions are the flags and arguments of `hiloop sandbox expose`.
type SandboxExposeOptions struct {
	Name   string
	Post   api.ExposurePost
	Output string
}

func newCmdSandboxExpose(f *Factory, runF func(*SandboxExposeOptions) error) *cobra.Command {
	opts := &SandboxExposeOptions{}
	var hostPort int
	var auth bool
	cmd := &cobra.Command{
		Use:   "expose NAME PORT [--host-addr ADDR] [--host-port P] [--auth]",
		Short: "Have sandboxd listen on the host for a port on a sandbox's loopback, until unexposed",
		Long: `Have sandboxd listen on the host for PORT on the sandbox's loopback and carry every
connection there, for as long as the exposure exists: it outlives this command, survives a
daemon restart and follows the sandbox through stop and start. While the sandbox is not
running, or nothing listens on PORT in it, a connection is refused: one that sends an HTTP
request gets a 503 or 502 answer saying why, any other is closed. ` + "`hiloop sandbox get`" + ` shows the
exposures, ` + "`hiloop sandbox unexpose`" + ` removes one, and deleting the sandbox removes them all.

It listens on 127.0.0.1 and PORT unless --host-addr and --host-port say otherwise
(--host-port 0 picks a free port, kept across restarts). An address other machines reach
(0.0.0.0, ::, an interface's address) also needs --allow-non-loopback, and sandboxd logs it.
Exposing the same port the same way again changes nothing.

With --auth (the default for an address other than loopback; --auth=false turns it off)
only the sandbox's owner gets through: sandboxd serves HTTP on the port and lets a request
pass only with the exposure's token. The command prints a one-time link (open it within 15
minutes: it sets the token as a cookie in the browser) and the token itself, which a script
sends as the Hiloop-Expose-Token header; both are good for 7 days. Running the command again
prints a new link. Anyone else gets a 401 page; the sandbox's server never sees the token.`,
		Example: `  hiloop sandbox expose web 8642                   # http://127.0.0.1:8642 reaches port 8642 in web
  hiloop sandbox expose web 3000 --host-port 0     # a free host port, printed
  hiloop sandbox expose web 80 --host-addr 0.0.0.0 --host-port 8080 --allow-non-loopback   # with auth
  hiloop sandbox expose web 8642 --auth            # on loopback too: a shared host's other users`,
		Args: exactArgs(2, "a sandbox NAME and a PORT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			port, err := api.ParsePort("port", args[1])
			if err != nil {
				return &usageError{err}
			}
			opts.Post.Port = port
			opts.Post.HostPort = nil
			if cmd.Flags().Changed("host-port") {
				opts.Post.HostPort = &hostPort
			}
			opts.Post.Auth = nil
			if cmd.Flags().Changed("auth") {
				opts.Post.Auth = &auth
			}
			if err := opts.Post.Normalize(); err != nil {
				return &usageError{err}
			}
			return runCommand(cmd, f, opts, runF, sandboxExposeRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Post.HostAddr, "host-addr", api.DefaultExposeHostAddr, "the host address to listen on")
	fl.IntVar(&hostPort, "host-port", 0, "the host port (default: PORT; 0 picks a free one)")
	fl.BoolVar(&opts.Post.AllowNonLoopback, "allow-non-loopback", false, "allow a --host-addr other machines can reach")
	fl.BoolVar(&auth, "auth", false, "let only the owner's link or token through (default: on for an address other than loopback)")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sandboxExposeRun(ctx context.Context, f *Factory, opts *SandboxExposeOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	e, err := c.ExposePort(ctx, opts.Name, opts.Post)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, e, func(t *table) {
		t.row("exposed:", exposureLine(e))
		if l := e.Link; l != nil {
			t.row("open:", l.URL+" (once, before "+l.LinkExpiresAt.Local().Format("15:04")+")")
			t.row("token:", l.Token+" (scripts: the "+api.ExposeTokenHeader+" header, until "+l.TokenExpiresAt.Local().Format(time.DateOnly)+")")
		}
	})
}

// exposureLine says where the host listens for a sandbox's port.
func exposureLine(e api.Exposure) string {
	s := net.JoinHostPort(e.HostAddr, strconv.Itoa(e.HostPort)) + " -> port " + strconv.Itoa(e.Port)
	if e.Auth {
		s += " (auth)"
	}
	if e.Error != "" {
		s += " (not listening: " + e.Error + ")"
	}
	return s
}

// SandboxUnexposeOptions are the arguments of `hiloop sandbox unexpose`.
type SandboxUnexposeOptions struct {
	Name string
	Port int
}

func newCmdSandboxUnexpose(f *Factory, runF func(*SandboxUnexposeOptions) error) *cobra.Command {
	opts := &SandboxUnexposeOptions{}
	return &cobra.Command{
		Use:     "unexpose NAME PORT",
		Short:   "Stop listening on the host for a sandbox's exposed port",
		Long:    "Remove the exposure of PORT: sandboxd closes its listener and the connections through it.",
		Example: "  hiloop sandbox unexpose web 8642",
		Args:    exactArgs(2, "a sandbox NAME and a PORT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			port, err := api.ParsePort("port", args[1])
			if err != nil {
				return &usageError{err}
			}
			opts.Port = port
			return runCommand(cmd, f, opts, runF, sandboxUnexposeRun)
		},
	}
}

func sandboxUnexposeRun(ctx context.Context, f *Factory, opts *SandboxUnexposeOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.UnexposePort(ctx, opts.Name, opts.Port); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "unexposed port %d of %s\n", opts.Port, opts.Name)
	return nil
}
