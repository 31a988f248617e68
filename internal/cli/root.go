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
		lines := errorLines(err)
		fmt.Fprintf(f.IO.ErrOut, "%s %s\n", f.IO.StylesStderr().Error.Render("hiloop:"), lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintln(f.IO.ErrOut, l)
		}
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

// lazyCmd is a command Run builds only when the command line names it, or when the whole
// tree is needed: building every command is a few percent of a short command's CPU. Its name
// and aliases are repeated here so that the one named is found without building any;
// TestLazyCommandsMatch keeps them in step with the commands'.
type lazyCmd struct {
	name    string
	aliases []string
	build   func(*Factory) *cobra.Command
	// A command with verbs may be built bare, its verbs then added as the line names them.
	bare  func() *cobra.Command
	verbs []lazyCmd
}

// rootNouns are the top-level commands, in the order the tree has them.
var rootNouns = []lazyCmd{
	{"sandbox", []string{"sandboxes", "sb"}, newCmdSandbox, newCmdSandboxBare, sandboxVerbs},
	{"secret", []string{"secrets"}, newCmdSecret, nil, nil},
	{"login", []string{"logins"}, newCmdLogin, nil, nil},
	{"audit", nil, func(f *Factory) *cobra.Command { return newCmdAudit(f, nil) }, nil, nil},
	{"session", []string{"sessions"}, newCmdSession, nil, nil},
	{"chat", nil, func(f *Factory) *cobra.Command { return newCmdChat(f, nil) }, nil, nil},
	{"usage", nil, func(f *Factory) *cobra.Command { return newCmdUsage(f, nil) }, nil, nil},
	{"image", []string{"images"}, newCmdImage, nil, nil},
	{"ssh-key", []string{"ssh-keys"}, newCmdSSHKey, nil, nil},
	{"user", []string{"users"}, newCmdUser, nil, nil},
	{"whoami", nil, func(f *Factory) *cobra.Command { return newCmdWhoAmI(f, nil) }, nil, nil},
	{"ssh-config", nil, func(f *Factory) *cobra.Command { return newCmdSSHConfig(f, nil) }, nil, nil},
	{"system", nil, newCmdSystem, nil, nil},
	{"remote", []string{"remotes"}, newCmdRemote, nil, nil},
	{"version", nil, func(f *Factory) *cobra.Command { return newCmdVersion(f, nil) }, nil, nil},
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
	pick := &daemonFlags{f: f}
	root.PersistentFlags().Var(&daemonFlag{pick, "host"}, "host", "daemon address: unix:///path, https://host:port or http://host:port (env HILOOP_HOST)")
	root.PersistentFlags().Var(&daemonFlag{pick, "remote"}, "remote", "the remote to talk to, as hiloop remote list names them; local is the unix socket (env HILOOP_REMOTE)")
	root.PersistentFlags().StringVar(&f.As, "as", "", "act in USER's namespace: an admin's calls on another user's sandboxes, snapshots and secrets")
	noColor := root.PersistentFlags().VarPF(&noColorFlag{io: f.IO}, "no-color", "", "print no colour (as NO_COLOR does; CLICOLOR_FORCE=1 forces colour on)")
	noColor.NoOptDefVal = "true"
	root.SetFlagErrorFunc(flagUsageError)
	addNamed(f, root, root, rootNouns, args, completions)
	if completions {
		addCompletions(root, f)
		_ = root.RegisterFlagCompletionFunc("remote", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return remoteNames(f, true), cobra.ShellCompDirectiveNoFileComp
		})
	}
	return root
}

// addNamed adds to parent, a command of root's tree, the one of cmds that args name (and of
// its verbs, the one they name), or all of them when all is set or args name none of cmds.
func addNamed(f *Factory, root, parent *cobra.Command, cmds []lazyCmd, args []string, all bool) {
	i := -1
	if !all {
		i = named(root, parent, cmds, args)
	}
	if i < 0 {
		for _, c := range cmds {
			parent.AddCommand(c.build(f))
		}
		return
	}
	if c := cmds[i]; c.verbs != nil {
		cmd := c.bare()
		parent.AddCommand(cmd)
		addNamed(f, root, cmd, c.verbs, args, false)
		return
	}
	parent.AddCommand(cmds[i].build(f))
}

// named is the index in cmds of the command args name under parent, found as cobra finds
// commands (flags and their values skipped), or -1: no arguments, only flags, help, an unknown
// or a misspelt command, whose handling (usage, suggestions) needs all of parent's commands.
func named(root, parent *cobra.Command, cmds []lazyCmd, args []string) int {
	if len(args) == 0 {
		return -1
	}
	stubs := make([]*cobra.Command, len(cmds))
	for i, c := range cmds {
		stubs[i] = &cobra.Command{Use: c.name, Aliases: c.aliases, Run: func(*cobra.Command, []string) {}}
	}
	parent.AddCommand(stubs...)
	defer parent.RemoveCommand(stubs...)
	found, _, err := root.Find(args)
	if err != nil {
		return -1
	}
	return slices.Index(stubs, found)
}

// daemonFlags are --host and --remote, which both pick the daemon: either, not both, and
// either beats both HILOOP_HOST and HILOOP_REMOTE (a flag beats the environment).
type daemonFlags struct {
	f    *Factory
	host bool // --host was given
	rem  bool // --remote was given
}

// daemonFlag is one of daemonFlags.
type daemonFlag struct {
	d    *daemonFlags
	name string // host or remote
}

func (d *daemonFlag) Type() string { return "string" }

func (d *daemonFlag) String() string {
	if d.d == nil { // pflag asks a zero value for its String, to tell a default from none
		return ""
	}
	if d.name == "host" {
		return d.d.f.Host
	}
	return d.d.f.Remote
}

func (d *daemonFlag) Set(v string) error {
	f := d.d.f
	if d.name == "host" {
		d.d.host = true
		f.Host, f.Remote = v, ""
	} else {
		d.d.rem = true
		f.Remote = v
	}
	if d.d.host && d.d.rem {
		return errors.New("--host and --remote both pick the daemon: give one")
	}
	return nil
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
		spares := "none"
		if v.Spares.Wanted > 0 {
			spares = fmt.Sprintf("%d of %d ready (image %s)", v.Spares.Ready, v.Spares.Wanted, v.Spares.Image)
		}
		t.row("spare sandboxes", spares)
	})
}
