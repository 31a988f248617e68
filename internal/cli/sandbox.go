package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func newCmdSandbox(f *Factory) *cobra.Command {
	cmd := newCmdSandboxBare()
	for _, v := range sandboxVerbs {
		cmd.AddCommand(v.build(f))
	}
	return cmd
}

// newCmdSandboxBare is `hiloop sandbox` without its verbs.
func newCmdSandboxBare() *cobra.Command {
	return &cobra.Command{
		Use:     "sandbox <verb>",
		Aliases: []string{"sandboxes", "sb"},
		Short:   "Create, run commands in, stop and delete sandboxes",
	}
}

// sandboxVerbs are the verbs of `hiloop sandbox`, built as a command line names them (lazyCmd).
var sandboxVerbs = []lazyCmd{
	{"create", nil, func(f *Factory) *cobra.Command { return newCmdSandboxCreate(f, nil) }, nil, nil},
	{"get", nil, func(f *Factory) *cobra.Command { return newCmdSandboxGet(f, nil) }, nil, nil},
	{"list", []string{"ls"}, func(f *Factory) *cobra.Command { return newCmdSandboxList(f, nil) }, nil, nil},
	{"start", nil, func(f *Factory) *cobra.Command { return newCmdSandboxStart(f, nil) }, nil, nil},
	{"stop", nil, func(f *Factory) *cobra.Command { return newCmdSandboxStop(f, nil) }, nil, nil},
	{"delete", []string{"rm"}, func(f *Factory) *cobra.Command { return newCmdSandboxDelete(f, nil) }, nil, nil},
	{"exec", nil, func(f *Factory) *cobra.Command { return newCmdSandboxExec(f, nil) }, nil, nil},
	{"ssh", nil, func(f *Factory) *cobra.Command { return newCmdSandboxSSH(f, nil) }, nil, nil},
	{"port-forward", nil, func(f *Factory) *cobra.Command { return newCmdSandboxPortForward(f, nil) }, nil, nil},
	{"expose", nil, func(f *Factory) *cobra.Command { return newCmdSandboxExpose(f, nil) }, nil, nil},
	{"unexpose", nil, func(f *Factory) *cobra.Command { return newCmdSandboxUnexpose(f, nil) }, nil, nil},
	{"grow", nil, func(f *Factory) *cobra.Command { return newCmdSandboxGrow(f, nil) }, nil, nil},
	{"restore", nil, func(f *Factory) *cobra.Command { return newCmdSandboxRestore(f, nil) }, nil, nil},
	{"egress", nil, func(f *Factory) *cobra.Command { return newCmdSandboxEgress(f, nil) }, nil, nil},
	{"budget", nil, func(f *Factory) *cobra.Command { return newCmdSandboxBudget(f, nil) }, nil, nil},
	{"secret", nil, newCmdSandboxSecret, nil, nil},
	{"snapshot", []string{"snapshots"}, newCmdSnapshot, nil, nil},
}

// SandboxCreateOptions are the flags and argument of `hiloop sandbox create`.
type SandboxCreateOptions struct {
	Post   api.SandboxesPost
	Output string
}

func newCmdSandboxCreate(f *Factory, runF func(*SandboxCreateOptions) error) *cobra.Command {
	opts := &SandboxCreateOptions{}
	var egress api.Egress
	var mode string
	var secrets []string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a sandbox and start it",
		Long: `Create a sandbox and start it.

NAME is 1-63 characters of a-z, 0-9 and '-', starting with a letter; it is also the hostname.
A durable /workspace survives stop and start; an ephemeral one is dropped at every stop.
Everything outside /workspace comes back from the image on every start.
Its egress is open unless --egress closed; --egress-allow and --egress-deny take HOST[:PORT]
rules as ` + "`hiloop sandbox egress`" + ` does, which shows and changes the policy later.
--secret attaches a secret (` + "`hiloop secret create`" + `): the sandbox sees only a placeholder.
--model-budget-tokens caps the model tokens its harnesses may spend (` + "`hiloop sandbox budget`" + `
changes it later).`,
		Example: `  hiloop sandbox create web --cpus 4 --memory-mb 8192 --workspace-gib 50
  hiloop sandbox create agent --egress closed --egress-allow api.anthropic.com --egress-allow '*.github.com'
  hiloop sandbox create agent --secret anthropic:ANTHROPIC_API_KEY
  hiloop sandbox create agent --image agents --model-budget-tokens 5000000`,
		Args: exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Post.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			if fl := cmd.Flags(); fl.Changed("egress") || fl.Changed("egress-allow") || fl.Changed("egress-deny") {
				var err error
				if egress.Mode, err = egressMode("--egress", mode); err != nil {
					return err
				}
				if egress.Allow, err = egressRules("--egress-allow", egress.Allow); err != nil {
					return err
				}
				if egress.Deny, err = egressRules("--egress-deny", egress.Deny); err != nil {
					return err
				}
				opts.Post.Egress = &egress
			}
			var err error
			if opts.Post.Secrets, err = secretFlags(secrets); err != nil {
				return err
			}
			if err := api.ValidateBudget("--model-budget-tokens", opts.Post.ModelBudgetTokens); err != nil {
				return &usageError{err}
			}
			if err := explicitZeros(cmd, "workspace-gib", "rootfs-gib", "cpus", "memory-mb"); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sandboxCreateRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar((*string)(&opts.Post.StorageClass), "storage-class", string(api.StorageDurable), "lifetime of /workspace: durable or ephemeral")
	fl.IntVar(&opts.Post.WorkspaceGiB, "workspace-gib", 0, fmt.Sprintf("workspace capacity in GiB, %d-%d (default %d)", api.MinWorkspaceGiB, api.MaxWorkspaceGiB, api.DefaultWorkspaceGiB))
	fl.IntVar(&opts.Post.RootfsGiB, "rootfs-gib", 0, fmt.Sprintf("limit in GiB on what it writes outside /workspace, %d-%d (default %d)", api.MinRootfsGiB, api.MaxRootfsGiB, api.DefaultRootfsGiB))
	// Left out, the daemon gives its default, or the host's figure where the host has less.
	fl.Float64Var(&opts.Post.CPUs, "cpus", 0, fmt.Sprintf("CPU limit in cores, at most the host's (default %g)", api.DefaultCPUs))
	fl.IntVar(&opts.Post.MemoryMB, "memory-mb", 0, fmt.Sprintf("memory limit in MiB, at most the host's (default %d)", api.DefaultMemoryMB))
	fl.StringVar((*string)(&opts.Post.PermissionPolicy), "permission-policy", string(api.PolicyAutoApprove), "how its agent sessions answer permission requests: auto-approve or ask (a session can override it)")
	fl.StringVar(&opts.Post.Image, "image", api.DefaultImage, "image to start from (see hiloop image list)")
	fl.BoolVar(&opts.Post.NoStart, "no-start", false, "leave the new sandbox stopped")
	fl.StringVar(&opts.Post.FromSnapshot, "from-snapshot", "", "start /workspace as a copy of this snapshot")
	fl.StringVar(&mode, "egress", string(api.EgressOpen), "egress policy: open (everything not denied) or closed (only what is allowed)")
	fl.StringArrayVar(&egress.Allow, "egress-allow", nil, "let it reach HOST[:PORT], e.g. api.example.com or '*.example.com:443' (repeatable)")
	fl.StringArrayVar(&egress.Deny, "egress-deny", nil, "refuse HOST[:PORT], in either mode (repeatable)")
	fl.StringArrayVar(&secrets, "secret", nil, "attach a secret: NAME[:ENVVAR], the variable defaulting to NAME in upper case (repeatable)")
	fl.Int64Var(&opts.Post.ModelBudgetTokens, "model-budget-tokens", 0, "the model tokens its harnesses may spend, all sessions together (default: no budget)")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// explicitZeros refuses 0 given on the command line to any of the named flags, all of them in one
// error: the API reads a zero as "the default", which is not what someone who typed --cpus 0
// asked for.
func explicitZeros(cmd *cobra.Command, names ...string) error {
	var zeros []string
	for _, name := range names {
		fl := cmd.Flags().Lookup(name)
		if fl.Changed {
			if v, err := strconv.ParseFloat(fl.Value.String(), 64); err == nil && v == 0 {
				zeros = append(zeros, "--"+name+" 0")
			}
		}
	}
	switch len(zeros) {
	case 0:
		return nil
	case 1:
		return &usageError{fmt.Errorf("invalid %s: leave the flag out for the default, or give a value in range", zeros[0])}
	}
	return &usageError{fmt.Errorf("invalid %s: leave the flags out for their defaults, or give values in range", strings.Join(zeros, ", "))}
}

func sandboxCreateRun(ctx context.Context, f *Factory, opts *SandboxCreateOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	sb, err := withProgress(f, "creating "+opts.Post.Name, func() (api.Sandbox, error) {
		return c.CreateSandbox(ctx, opts.Post)
	})
	if err != nil {
		return err
	}
	return printSandbox(f, opts.Output, sb)
}

// SandboxGetOptions are the argument and flags of `hiloop sandbox get`.
type SandboxGetOptions struct {
	Name   string
	Output string
}

func newCmdSandboxGet(f *Factory, runF func(*SandboxGetOptions) error) *cobra.Command {
	opts := &SandboxGetOptions{}
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one sandbox, with the model tokens its harnesses spent and its budget",
		Args:  exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sandboxGetRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sandboxGetRun(ctx context.Context, f *Factory, opts *SandboxGetOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	sb, err := c.GetSandbox(ctx, opts.Name)
	if err != nil {
		return err
	}
	return printSandbox(f, opts.Output, sb)
}

func printSandbox(f *Factory, output string, sb api.Sandbox) error {
	return printOutput(f.IO, output, sb, func(t *table) {
		t.row("name:", sb.Name)
		t.row("state:", stateText(sb))
		if sb.Error != "" {
			t.row("error:", sb.Error)
		}
		t.row("image:", imageSummary(sb))
		t.row("cpus:", strconv.FormatFloat(sb.CPUs, 'g', -1, 64))
		memory := fmt.Sprintf("%d MiB", sb.MemoryMB)
		if sb.OOMKills > 0 {
			memory += fmt.Sprintf(" (%d killed for it since the start)", sb.OOMKills)
		}
		t.row("memory:", memory)
		t.row("permissions:", string(sb.PermissionPolicy))
		t.row("egress:", egressSummary(sb.Egress))
		if len(sb.Secrets) > 0 {
			var list []string
			for _, a := range sb.Secrets {
				list = append(list, a.Secret+" ($"+a.Env+")")
			}
			t.row("secrets:", strings.Join(list, ", "))
		}
		t.row("workspace:", fmt.Sprintf("%s %s (%s)", capacity(sb.Workspace), sb.Workspace.StorageClass, growth(sb.Workspace)))
		t.row("rootfs:", rootfsSummary(sb.Rootfs))
		for i, e := range sb.Exposures {
			label := ""
			if i == 0 {
				label = "exposed:"
			}
			t.row(label, exposureLine(e))
		}
		modelUsageRows(t, sb.ModelUsage)
		t.row("created:", sb.CreatedAt.Local().Format(time.RFC3339))
		if sb.StartedAt != nil {
			t.row("started:", sb.StartedAt.Local().Format(time.RFC3339))
		}
	})
}

// imageSummary prints a sandbox's image and, while it runs, the build of it it runs.
func imageSummary(sb api.Sandbox) string {
	if sb.ImageBuiltAt == nil {
		return sb.Image
	}
	s := fmt.Sprintf("%s (built %s)", sb.Image, sb.ImageBuiltAt.Local().Format(time.RFC3339))
	if sb.ImageRebuilt {
		s += "; built again since: a stop and start takes the new build"
	}
	return s
}

// capacity prints a workspace's capacity.
func capacity(w api.Workspace) string { return formatBytes(w.CapacityBytes) }

// rootfsSummary prints a root filesystem's limit.
func rootfsSummary(r api.Rootfs) string {
	if !r.Limited {
		return formatBytes(r.CapacityBytes) + " (not enforced by this daemon)"
	}
	return formatBytes(r.CapacityBytes) + " limit, wiped at every start"
}

func growth(w api.Workspace) string {
	if w.Resizable {
		return "growable"
	}
	return "fixed size"
}

// SandboxListOptions are the flags of `hiloop sandbox list`.
type SandboxListOptions struct {
	AllUsers bool
	Output   string
}

func newCmdSandboxList(f *Factory, runF func(*SandboxListOptions) error) *cobra.Command {
	opts := &SandboxListOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sandboxes",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sandboxListRun)
		},
	}
	addAllUsersFlag(cmd, &opts.AllUsers)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sandboxListRun(ctx context.Context, f *Factory, opts *SandboxListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.ListSandboxes(ctx, listOptions(opts.AllUsers)...)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, api.SandboxList{Sandboxes: list}, func(t *table) {
		t.head(withUser(opts.AllUsers, "USER", "NAME", "STATE", "IMAGE", "CPUS", "MEMORY", "WORKSPACE", "AGE")...)
		for _, sb := range list {
			t.row(withUser(opts.AllUsers, sb.Owner, sb.Name, stateText(sb), sb.Image, strconv.FormatFloat(sb.CPUs, 'g', -1, 64),
				fmt.Sprintf("%d MiB", sb.MemoryMB),
				fmt.Sprintf("%s %s", capacity(sb.Workspace), sb.Workspace.StorageClass),
				age(sb.CreatedAt))...)
		}
	})
}

// stateText is a sandbox's state as the tables show it: "running (unresponsive)" for a running
// sandbox whose init did not answer in time.
func stateText(sb api.Sandbox) string {
	if sb.Unresponsive {
		return string(sb.State) + " (unresponsive)"
	}
	return string(sb.State)
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// SandboxLifecycleOptions are the argument and flags of `hiloop sandbox start` and `stop`.
type SandboxLifecycleOptions struct {
	Name string
	// Output is the -o format, or "" for the one-line answer "NAME STATE".
	Output string
}

func newCmdSandboxStart(f *Factory, runF func(*SandboxLifecycleOptions) error) *cobra.Command {
	return newCmdSandboxLifecycle(f, runF, "start", "starting", "Start a stopped sandbox (a fresh root filesystem, the same /workspace)",
		func(ctx context.Context, c *client.Client, name string) (api.Sandbox, error) {
			return c.StartSandbox(ctx, name)
		})
}

func newCmdSandboxStop(f *Factory, runF func(*SandboxLifecycleOptions) error) *cobra.Command {
	return newCmdSandboxLifecycle(f, runF, "stop", "stopping", "Stop a sandbox: every process ends; a durable /workspace stays",
		func(ctx context.Context, c *client.Client, name string) (api.Sandbox, error) {
			return c.StopSandbox(ctx, name)
		})
}

func newCmdSandboxLifecycle(f *Factory, runF func(*SandboxLifecycleOptions) error, verb, doing, short string,
	call func(context.Context, *client.Client, string) (api.Sandbox, error)) *cobra.Command {
	opts := &SandboxLifecycleOptions{}
	cmd := &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := summaryUnlessOutput(cmd, &opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, func(ctx context.Context, f *Factory, opts *SandboxLifecycleOptions) error {
				c, err := f.Client()
				if err != nil {
					return err
				}
				sb, err := withProgress(f, doing+" "+opts.Name, func() (api.Sandbox, error) {
					return call(ctx, c, opts.Name)
				})
				if err != nil {
					return err
				}
				if opts.Output != "" {
					return printSandbox(f, opts.Output, sb)
				}
				fmt.Fprintf(f.IO.Out, "%s %s\n", sb.Name, sb.State)
				return nil
			})
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// SandboxDeleteOptions are the argument and flags of `hiloop sandbox delete`.
type SandboxDeleteOptions struct {
	Name          string
	WithSnapshots bool
}

func newCmdSandboxDelete(f *Factory, runF func(*SandboxDeleteOptions) error) *cobra.Command {
	opts := &SandboxDeleteOptions{}
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Stop a sandbox and delete it with its workspace (its snapshots stay)",
		Args:    exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommand(cmd, f, opts, runF, sandboxDeleteRun)
		},
	}
	cmd.Flags().BoolVar(&opts.WithSnapshots, "with-snapshots", false, "also delete the snapshots taken of the sandbox")
	return cmd
}

func sandboxDeleteRun(ctx context.Context, f *Factory, opts *SandboxDeleteOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	label := "deleting " + opts.Name
	if opts.WithSnapshots {
		label += " and its snapshots"
	}
	_, err = withProgress(f, label, func() (struct{}, error) {
		return struct{}{}, c.DeleteSandbox(ctx, opts.Name, opts.WithSnapshots)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "%s deleted\n", opts.Name)
	return nil
}
