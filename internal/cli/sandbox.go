package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func newCmdSandbox(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox <verb>",
		Aliases: []string{"sandboxes", "sb"},
		Short:   "Create, run commands in, stop and delete sandboxes",
	}
	cmd.AddCommand(
		newCmdSandboxCreate(f, nil),
		newCmdSandboxGet(f),
		newCmdSandboxList(f),
		newCmdSandboxLifecycle(f, "start", "Start a stopped sandbox (a fresh root filesystem, the same /workspace)",
			func(ctx context.Context, c *client.Client, name string) (api.Sandbox, error) {
				return c.StartSandbox(ctx, name)
			}),
		newCmdSandboxLifecycle(f, "stop", "Stop a sandbox: every process ends; a durable /workspace stays",
			func(ctx context.Context, c *client.Client, name string) (api.Sandbox, error) {
				return c.StopSandbox(ctx, name)
			}),
		newCmdSandboxDelete(f),
		newCmdSandboxExec(f, nil),
		newCmdSandboxSSH(f),
		newCmdSandboxGrow(f),
		newCmdSandboxRestore(f),
		newCmdSnapshot(f),
	)
	return cmd
}

// CreateOptions are the flags of `hiloop sandbox create`.
type CreateOptions struct {
	Post   api.SandboxesPost
	Output string
}

func newCmdSandboxCreate(f *Factory, runF func(*CreateOptions) error) *cobra.Command {
	opts := &CreateOptions{}
	var storageClass string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a sandbox and start it",
		Long: `Create a sandbox and start it.

NAME is 1-63 characters of a-z, 0-9 and '-', starting with a letter; it is also the hostname.
A durable /workspace survives stop and start; an ephemeral one is dropped at every stop.
Everything outside /workspace comes back from the image on every start.`,
		Example: "  hiloop sandbox create web --cpus 4 --memory-mb 8192 --workspace-gib 50",
		Args:    exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Post.Name = args[0]
			opts.Post.StorageClass = api.StorageClass(storageClass)
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return createRun(cmd.Context(), f, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&storageClass, "storage-class", "durable", "lifetime of /workspace: durable or ephemeral")
	fl.IntVar(&opts.Post.WorkspaceGiB, "workspace-gib", 0, fmt.Sprintf("workspace capacity in GiB, %d-%d (default %d)", api.MinWorkspaceGiB, api.MaxWorkspaceGiB, api.DefaultWorkspaceGiB))
	fl.Float64Var(&opts.Post.CPUs, "cpus", api.DefaultCPUs, "CPU limit in cores")
	fl.IntVar(&opts.Post.MemoryMB, "memory-mb", api.DefaultMemoryMB, "memory limit in MiB")
	fl.StringVar((*string)(&opts.Post.PermissionPolicy), "permission-policy", string(api.PolicyAutoApprove), "how its agent sessions answer permission requests: auto-approve or ask (a session can override it)")
	fl.StringVar(&opts.Post.Image, "image", api.DefaultImage, "image to start from (`hiloop image list`)")
	fl.BoolVar(&opts.Post.NoStart, "no-start", false, "leave the new sandbox stopped")
	fl.StringVar(&opts.Post.FromSnapshot, "from-snapshot", "", "start /workspace as a copy of this snapshot")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func createRun(ctx context.Context, f *Factory, opts *CreateOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	sb, err := c.CreateSandbox(ctx, opts.Post)
	if err != nil {
		return err
	}
	return printSandbox(f, opts.Output, sb)
}

func newCmdSandboxGet(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one sandbox",
		Args:  exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			sb, err := c.GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printSandbox(f, output, sb)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func printSandbox(f *Factory, output string, sb api.Sandbox) error {
	return printOutput(f.IO.Out, output, sb, func(t *table) {
		t.row("name:", sb.Name)
		t.row("state:", string(sb.State))
		if sb.Error != "" {
			t.row("error:", sb.Error)
		}
		t.row("image:", sb.Image)
		t.row("cpus:", strconv.FormatFloat(sb.CPUs, 'g', -1, 64))
		t.row("memory:", fmt.Sprintf("%d MiB", sb.MemoryMB))
		t.row("permissions:", string(sb.PermissionPolicy))
		t.row("workspace:", fmt.Sprintf("%s %s (%s)", capacity(sb.Workspace), sb.Workspace.StorageClass, growth(sb.Workspace)))
		t.row("created:", sb.CreatedAt.Local().Format(time.RFC3339))
		if sb.StartedAt != nil {
			t.row("started:", sb.StartedAt.Local().Format(time.RFC3339))
		}
	})
}

// capacity prints a growable workspace in the whole GiB it was sized and grown in.
func capacity(w api.Workspace) string {
	if w.Resizable && w.CapacityBytes%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", w.CapacityBytes>>30)
	}
	return formatBytes(w.CapacityBytes)
}

func growth(w api.Workspace) string {
	if w.Resizable {
		return "growable"
	}
	return "fixed size"
}

func newCmdSandboxList(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sandboxes",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			list, err := c.ListSandboxes(cmd.Context())
			if err != nil {
				return err
			}
			return printOutput(f.IO.Out, output, api.SandboxList{Sandboxes: list}, func(t *table) {
				t.row("NAME", "STATE", "IMAGE", "CPUS", "MEMORY", "WORKSPACE", "AGE")
				for _, sb := range list {
					t.row(sb.Name, string(sb.State), sb.Image, strconv.FormatFloat(sb.CPUs, 'g', -1, 64),
						fmt.Sprintf("%d MiB", sb.MemoryMB),
						fmt.Sprintf("%s %s", capacity(sb.Workspace), sb.Workspace.StorageClass),
						age(sb.CreatedAt))
				}
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
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

func newCmdSandboxLifecycle(f *Factory, verb, short string, call func(context.Context, *client.Client, string) (api.Sandbox, error)) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			sb, err := call(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("output") {
				return printSandbox(f, output, sb)
			}
			fmt.Fprintf(f.IO.Out, "%s %s\n", sb.Name, sb.State)
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func newCmdSandboxDelete(f *Factory) *cobra.Command {
	var withSnapshots bool
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Stop a sandbox and delete it with its workspace (its snapshots stay)",
		Args:    exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			if err := c.DeleteSandbox(cmd.Context(), args[0], withSnapshots); err != nil {
				return err
			}
			fmt.Fprintf(f.IO.Out, "%s deleted\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&withSnapshots, "with-snapshots", false, "also delete the snapshots taken of the sandbox")
	return cmd
}

func checkOutput(format string) error {
	switch format {
	case "table", "json", "yaml":
		return nil
	}
	return &usageError{fmt.Errorf("invalid --output %q: use table, json or yaml", format)}
}
