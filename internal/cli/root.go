package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/api"
)

// Version is set at build time with -ldflags "-X github.com/hiloop/hiloop/internal/cli.Version=...".
var Version = "dev"

// Main runs hiloop with the process's arguments and returns its exit code.
func Main() int {
	return Run(NewFactory(), os.Args[1:])
}

// Run runs hiloop with args and returns its exit code; it is Main without the process globals.
func Run(f *Factory, args []string) int {
	// Completions are wired only for the shell's completion request: every other command would
	// pay for walking the whole tree for nothing.
	completing := slices.Contains(args, cobra.ShellCompRequestCmd) || slices.Contains(args, cobra.ShellCompNoDescRequestCmd)
	root := newCmdRoot(f, completing, args)
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
		fmt.Fprintf(f.IO.ErrOut, "%s %s\n", f.IO.StylesStderr().Error.Render("hiloop:"), plain.msg)
	default:
		fmt.Fprintf(f.IO.ErrOut, "%s %s\n", f.IO.StylesStderr().Error.Render("hiloop:"), err)
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
		fmt.Fprintf(f.IO.ErrOut, "hiloop: %s this CLI is %s but sandboxd is %s; update the older one\n", f.IO.StylesStderr().Warning.Render("warning:"), Version, daemon)
	}
}

func commandPath(root *cobra.Command, args []string) string {
	if c, _, err := root.Find(args); err == nil {
		return c.CommandPath()
	}
	return root.Name()
}

// NewCmdRoot builds the hiloop command tree, its completions wired.
func NewCmdRoot(f *Factory) *cobra.Command {
	return newCmdRoot(f, true, nil)
}

// rootNouns are the top-level commands, in the order the tree has them. A command line that
// names one (by name or alias) gets a tree of that one alone: building every command is a few
// percent of a short command's CPU. Their names and aliases are repeated here so that the one
// named is found without building any; TestRootNounsMatchCommands keeps the two in step.
var rootNouns = []struct {
	name    string
	aliases []string
	build   func(*Factory) *cobra.Command
}{
	{"sandbox", []string{"sandboxes", "sb"}, newCmdSandbox},
	{"secret", []string{"secrets"}, newCmdSecret},
	{"login", []string{"logins"}, newCmdLogin},
	{"audit", nil, func(f *Factory) *cobra.Command { return newCmdAudit(f, nil) }},
	{"session", []string{"sessions"}, newCmdSession},
	{"chat", nil, func(f *Factory) *cobra.Command { return newCmdChat(f, nil) }},
	{"usage", nil, func(f *Factory) *cobra.Command { return newCmdUsage(f, nil) }},
	{"image", []string{"images"}, newCmdImage},
	{"ssh-key", []string{"ssh-keys"}, newCmdSSHKey},
	{"ssh-config", nil, func(f *Factory) *cobra.Command { return newCmdSSHConfig(f, nil) }},
	{"version", nil, func(f *Factory) *cobra.Command { return newCmdVersion(f, nil) }},
}

// newCmdRoot is NewCmdRoot with its argument and flag completions (addCompletions) or without.
// Without them, the tree holds only the top-level command args name, if they name one.
func newCmdRoot(f *Factory, completions bool, args []string) *cobra.Command {
	root := &cobra.Command{
		Use:           "hiloop <noun> <verb>",
		Short:         "Manage devboxes for coding agents",
		Long:          "hiloop creates isolated Linux sandboxes with a durable /workspace, runs commands in them, and manages their images.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.PersistentFlags().StringVar(&f.Host, "host", f.Host, "daemon address: unix:///path or http://host:port (env HILOOP_HOST)")
	noColor := root.PersistentFlags().VarPF(&noColorFlag{io: f.IO}, "no-color", "", "print no colour (as NO_COLOR does; CLICOLOR_FORCE=1 forces colour on)")
	noColor.NoOptDefVal = "true"
	root.SetFlagErrorFunc(flagUsageError)
	if i := namedNoun(root, args); i >= 0 && !completions {
		root.AddCommand(rootNouns[i].build(f))
		return root
	}
	for _, n := range rootNouns {
		root.AddCommand(n.build(f))
	}
	if completions {
		addCompletions(root, f)
	}
	return root
}

// namedNoun is the index in rootNouns of the top-level command args name, found as cobra finds
// commands (root's flags and their values skipped), or -1: no arguments, only flags, help, an
// unknown or a misspelt command, whose handling (usage, suggestions) needs the whole tree.
func namedNoun(root *cobra.Command, args []string) int {
	if len(args) == 0 {
		return -1
	}
	stubs := make([]*cobra.Command, len(rootNouns))
	for i, n := range rootNouns {
		stubs[i] = &cobra.Command{Use: n.name, Aliases: n.aliases, Run: func(*cobra.Command, []string) {}}
	}
	root.AddCommand(stubs...)
	defer root.RemoveCommand(stubs...)
	found, _, err := root.Find(args)
	if err != nil {
		return -1
	}
	return slices.Index(stubs, found)
}

// noColorFlag is --no-color. It turns colour off as it is parsed, so that an error met later in
// the command line is printed plain too.
type noColorFlag struct {
	io  *iostreams.IOStreams
	set bool
}

func (n *noColorFlag) String() string { return strconv.FormatBool(n.set) }
func (n *noColorFlag) Type() string   { return "bool" }

func (n *noColorFlag) Set(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	n.set = b
	n.io.SetColorEnabled(!b)
	return nil
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

// followContext is ctx, ended by Ctrl-C when follow is set: a command that follows a stream
// until interrupted then ends with success.
func followContext(ctx context.Context, follow bool) (context.Context, context.CancelFunc) {
	if !follow {
		return ctx, func() {}
	}
	return signal.NotifyContext(ctx, os.Interrupt)
}

// maxArgs refuses more than n positional arguments, naming what the command takes.
func maxArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return &usageError{fmt.Errorf("%s takes at most %s", cmd.CommandPath(), names)}
		}
		return nil
	}
}

// runCommand does a command's work with the options its flags and arguments parsed into, or,
// in a test, hands them to runF instead.
func runCommand[T any](cmd *cobra.Command, f *Factory, opts *T, runF func(*T) error, run func(context.Context, *Factory, *T) error) error {
	if runF != nil {
		return runF(opts)
	}
	return run(cmd.Context(), f, opts)
}

// VersionOptions are the flags of `hiloop version`.
type VersionOptions struct {
	Output string
}

func newCmdVersion(f *Factory, runF func(*VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the CLI's and the daemon's versions",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, versionRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func versionRun(ctx context.Context, f *Factory, opts *VersionOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	v, err := c.Version(ctx)
	if err != nil {
		// The CLI's own version is known whatever the daemon's state: say it, then why the
		// daemon's is not.
		_ = printOutput(f.IO, opts.Output, struct {
			Client string `json:"client"`
		}{Version}, func(t *table) { t.row("client", Version) })
		return err
	}
	out := struct {
		Client string          `json:"client"`
		Daemon api.VersionInfo `json:"daemon"`
	}{Version, v}
	return printOutput(f.IO, opts.Output, out, func(t *table) {
		t.row("client", Version)
		t.row("daemon", v.Version)
		t.row("api", v.API)
		t.row("volume driver", v.VolumeDriver)
	})
}
