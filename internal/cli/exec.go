package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// SandboxExecOptions are the flags and arguments of `hiloop sandbox exec`.
type SandboxExecOptions struct {
	Name    string
	Request api.ExecRequest
	Timeout time.Duration
}

func newCmdSandboxExec(f *Factory, runF func(*SandboxExecOptions) error) *cobra.Command {
	opts := &SandboxExecOptions{}
	cmd := &cobra.Command{
		Use:   "exec NAME [flags] -- CMD [ARGS...]",
		Short: "Run a command in a running sandbox",
		Long: `Run a command in a running sandbox, streaming its stdout and stderr.

hiloop exits with the command's exit code (128+n when a signal n killed it). With --timeout the
command's whole process tree is killed when the time is up and hiloop exits 124.
The command runs as agent in /workspace with a login environment unless told otherwise.`,
		Example: `  hiloop sandbox exec web -- ls -la
  hiloop sandbox exec web --timeout 10m -- make test
  hiloop sandbox exec web -it -- bash`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return &usageError{fmt.Errorf("exec takes a sandbox NAME and a command after --, e.g. hiloop sandbox exec web -- ls")}
			}
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return &usageError{fmt.Errorf("exec takes one sandbox NAME before --, got %d", dash)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			opts.Request.Command = args[1:]
			if opts.Timeout < 0 {
				return &usageError{fmt.Errorf("invalid --timeout %s: use a positive duration such as 30s or 10m", opts.Timeout)}
			}
			opts.Request.TimeoutMS = opts.Timeout.Milliseconds()
			if opts.Timeout > 0 && opts.Request.TimeoutMS == 0 {
				opts.Request.TimeoutMS = 1
			}
			return runCommand(cmd, f, opts, runF, sandboxExecRun)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&opts.Timeout, "timeout", 0, "kill the command's process tree after this long (e.g. 30s, 10m) and exit 124")
	fl.StringArrayVarP(&opts.Request.Env, "env", "e", nil, "set an environment variable KEY=VALUE (repeatable)")
	fl.StringVarP(&opts.Request.WorkDir, "workdir", "w", "", "working directory (default: the image's WORKDIR, else /workspace)")
	fl.StringVarP(&opts.Request.User, "user", "u", api.DefaultExecUser, "user to run as")
	fl.BoolVarP(&opts.Request.Stdin, "interactive", "i", false, "forward stdin to the command")
	fl.BoolVarP(&opts.Request.TTY, "tty", "t", false, "give the command a pseudo-terminal")
	return cmd
}

func sandboxExecRun(ctx context.Context, f *Factory, opts *SandboxExecOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	// Pipes and files go to the daemon, which moves the command's data through them itself.
	stdio := client.ExecIO{Stdin: f.IO.In, Stdout: f.IO.Out, Stderr: f.IO.ErrOut, HandOff: true}
	req := opts.Request
	if req.TTY {
		in, isFile := f.IO.In.(*os.File)
		if !isFile || !term.IsTerminal(int(in.Fd())) {
			fmt.Fprintln(f.IO.ErrOut, "hiloop: warning: -t without a terminal on stdin; the command gets a pseudo-terminal anyway")
		} else {
			if w, h, err := term.GetSize(int(in.Fd())); err == nil {
				req.Rows, req.Cols = uint16(h), uint16(w)
			}
			if req.Stdin {
				state, err := term.MakeRaw(int(in.Fd()))
				if err != nil {
					return fmt.Errorf("put the terminal in raw mode: %w", err)
				}
				defer term.Restore(int(in.Fd()), state)
			}
			resize, stop := watchResize(in)
			defer stop()
			stdio.Resize = resize
		}
	}
	if !req.TTY {
		sigs, stop := forwardSignals()
		defer stop()
		stdio.Signals = sigs
	}
	res, err := c.Exec(ctx, opts.Name, req, stdio)
	if err != nil {
		return err
	}
	if res.TimedOut {
		return &exitMessage{code: ExitTimeout, msg: fmt.Sprintf("command timed out after %s; its processes were killed", opts.Timeout)}
	}
	if res.OOMKilled {
		return &exitMessage{code: res.ExitCode, msg: fmt.Sprintf("killed: out of memory (limit %d MiB); `hiloop sandbox get %s` counts these", res.MemoryLimitMB, opts.Name)}
	}
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode}
	}
	return nil
}
