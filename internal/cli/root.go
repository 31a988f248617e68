package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// Version is set at build time with -ldflags "-X github.com/hiloop/hiloop/internal/cli.Version=...".
var Version = "dev"

// Exit codes of hiloop (documented in docs/cli.md). `sandbox exec` exits with the remote
// command's code once the command has run.
const (
	ExitOK          = 0
	ExitError       = 1 // any other failure
	ExitUsage       = 2 // bad flags or arguments, or the daemon refused a value
	ExitUnreachable = 3 // the daemon could not be reached
	ExitNotFound    = 4 // no such sandbox, image, snapshot, key, session or permission request
	ExitConflict    = 5 // the sandbox's or session's state, or a name, forbids the call
	ExitUnsupported = 6 // this deployment cannot do that
	ExitTimeout     = api.ExitCodeTimeout
)

// exitError carries an exit code with no message to print (the command said all it had to).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError marks a mistake in the command line.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// Main runs hiloop with the process's arguments and returns its exit code.
func Main() int {
	return Run(NewFactory(), os.Args[1:])
}

// Run runs hiloop with args and returns its exit code; it is Main without the process globals.
func Run(f *Factory, args []string) int {
	root := NewCmdRoot(f)
	root.SetArgs(args)
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	err := root.ExecuteContext(context.Background())
	warnVersionSkew(f)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	var ee *exitError
	var plain *plainUsageError
	switch {
	case errors.As(err, &ee):
	case errors.As(err, &plain):
		fmt.Fprintln(f.IO.ErrOut, plain.msg)
	default:
		fmt.Fprintf(f.IO.ErrOut, "hiloop: %s\n", err)
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(f.IO.ErrOut, "Run '%s --help' for usage.\n", commandPath(root, args))
		}
	}
	return code
}

// warnVersionSkew tells, on stderr, when the CLI and the daemon it talked to are different builds.
func warnVersionSkew(f *Factory) {
	if f.client == nil {
		return
	}
	if daemon := f.client.DaemonVersion(); daemon != "" && daemon != Version && Version != "dev" && daemon != "dev" {
		fmt.Fprintf(f.IO.ErrOut, "hiloop: warning: this CLI is %s but sandboxd is %s; update the older one\n", Version, daemon)
	}
}

// exitCode maps an error to hiloop's documented exit codes.
func exitCode(err error) int {
	var ee *exitError
	var em *exitMessage
	var ue *usageError
	var unreachable *client.UnreachableError
	var apiErr *api.Error
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &em):
		return em.code
	case errors.As(err, &ue), errors.As(err, new(*plainUsageError)):
		return ExitUsage
	case errors.As(err, &unreachable):
		return ExitUnreachable
	case errors.As(err, &apiErr):
		switch apiErr.Code {
		case api.CodeBadRequest, api.CodeInvalidArgument, api.CodeInvalidName, api.CodeBodyTooLarge,
			api.CodeGrowNotLarger, api.CodeHarnessNotFound:
			return ExitUsage
		case api.CodeSandboxNotFound, api.CodeImageNotFound, api.CodeSnapshotNotFound, api.CodeSSHKeyNotFound,
			api.CodeNotFound, api.CodeSessionNotFound, api.CodePermissionNotFound:
			return ExitNotFound
		case api.CodeSandboxExists, api.CodeSandboxNotRunning, api.CodeInvalidState,
			api.CodeIdempotencyKeyReused, api.CodeBuildInProgress, api.CodeSnapshotExists,
			api.CodeSnapshotInProgress, api.CodeSSHKeyExists, api.CodeTurnInProgress, api.CodePermissionDecided:
			return ExitConflict
		case api.CodeUnsupported:
			return ExitUnsupported
		}
	}
	return ExitError
}

func commandPath(root *cobra.Command, args []string) string {
	if c, _, err := root.Find(args); err == nil {
		return c.CommandPath()
	}
	return root.Name()
}

// NewCmdRoot builds the hiloop command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:           "hiloop <noun> <verb>",
		Short:         "Manage devboxes for coding agents",
		Long:          "hiloop creates isolated Linux sandboxes with a durable /workspace, runs commands in them, and manages their images.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.PersistentFlags().StringVar(&f.Host, "host", f.Host, "daemon address: unix:///path or http://host:port (env HILOOP_HOST)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(newCmdSandbox(f), newCmdSession(f), newCmdImage(f), newCmdSSHKey(f), newCmdSSHConfig(f), newCmdVersion(f))
	return root
}

// exactArgs is cobra.ExactArgs with a usage error naming what is missing.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{fmt.Errorf("%s takes %s (got %d argument(s))", cmd.CommandPath(), names, len(args))}
		}
		return nil
	}
}

func newCmdVersion(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the CLI's and the daemon's versions",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			v, err := c.Version(cmd.Context())
			if err != nil {
				return err
			}
			out := struct {
				Client string          `json:"client"`
				Daemon api.VersionInfo `json:"daemon"`
			}{Version, v}
			return printOutput(f.IO.Out, output, out, func(t *table) {
				t.row("client", Version)
				t.row("daemon", v.Version)
				t.row("api", v.API)
				t.row("volume driver", v.VolumeDriver)
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
