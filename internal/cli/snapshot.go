package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// SandboxGrowOptions are the argument and flags of `hiloop sandbox grow`.
type SandboxGrowOptions struct {
	Name         string
	WorkspaceGiB int
	// Output is the -o format, or "" for the one-line answer.
	Output string
}

func newCmdSandboxGrow(f *Factory, runF func(*SandboxGrowOptions) error) *cobra.Command {
	opts := &SandboxGrowOptions{}
	cmd := &cobra.Command{
		Use:   "grow NAME --workspace-gib N",
		Short: "Grow a sandbox's workspace, online if it runs (one-way)",
		Long: `Grow a sandbox's /workspace to N GiB without interrupting the processes that use it.

Growth is one-way: N must exceed the capacity shown by ` + "`hiloop sandbox get NAME`" + `.`,
		Example: "  hiloop sandbox grow web --workspace-gib 50",
		Args:    exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if !cmd.Flags().Changed("workspace-gib") {
				return &usageError{fmt.Errorf("grow needs --workspace-gib N, the new capacity in GiB")}
			}
			if err := summaryUnlessOutput(cmd, &opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sandboxGrowRun)
		},
	}
	cmd.Flags().IntVar(&opts.WorkspaceGiB, "workspace-gib", 0, fmt.Sprintf("the new workspace capacity in GiB, at most %d", api.MaxWorkspaceGiB))
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sandboxGrowRun(ctx context.Context, f *Factory, opts *SandboxGrowOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	sb, err := withProgress(f, "growing the workspace of "+opts.Name, func() (api.Sandbox, error) {
		return c.GrowSandbox(ctx, opts.Name, opts.WorkspaceGiB)
	})
	if err != nil {
		return err
	}
	if opts.Output != "" {
		return printSandbox(f, opts.Output, sb)
	}
	fmt.Fprintf(f.IO.Out, "%s workspace %s\n", sb.Name, capacity(sb.Workspace))
	return nil
}

// SandboxRestoreOptions are the arguments of `hiloop sandbox restore`.
type SandboxRestoreOptions struct {
	Name     string
	Snapshot string
}

func newCmdSandboxRestore(f *Factory, runF func(*SandboxRestoreOptions) error) *cobra.Command {
	opts := &SandboxRestoreOptions{}
	return &cobra.Command{
		Use:     "restore NAME SNAPSHOT",
		Short:   "Roll a stopped sandbox's workspace back to a snapshot",
		Example: "  hiloop sandbox stop web && hiloop sandbox restore web web-20261129-101500",
		Args:    exactArgs(2, "a sandbox NAME and a SNAPSHOT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Snapshot = args[0], args[1]
			return runCommand(cmd, f, opts, runF, sandboxRestoreRun)
		},
	}
}

func sandboxRestoreRun(ctx context.Context, f *Factory, opts *SandboxRestoreOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	sb, err := withProgress(f, "restoring "+opts.Name+" from "+opts.Snapshot, func() (api.Sandbox, error) {
		return c.RestoreSandbox(ctx, opts.Name, opts.Snapshot)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "%s restored from %s\n", sb.Name, opts.Snapshot)
	return nil
}

func newCmdSnapshot(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot <verb>",
		Aliases: []string{"snapshots"},
		Short:   "Seal, list and delete snapshots of sandbox workspaces",
	}
	cmd.AddCommand(newCmdSnapshotCreate(f, nil), newCmdSnapshotList(f, nil), newCmdSnapshotGet(f, nil), newCmdSnapshotDelete(f, nil))
	return cmd
}

// SnapshotCreateOptions are the argument and flags of `hiloop sandbox snapshot create`.
type SnapshotCreateOptions struct {
	Sandbox string
	// Post.Name is "" unless --name was given: the name is chosen when the snapshot is taken.
	Post           api.SnapshotsPost
	IdempotencyKey string
	Output         string
}

func newCmdSnapshotCreate(f *Factory, runF func(*SnapshotCreateOptions) error) *cobra.Command {
	opts := &SnapshotCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME [--name SNAPSHOT] [--idempotency-key KEY]",
		Short: "Seal a point-in-time snapshot of a sandbox's workspace while it keeps running",
		Long: `Seal a consistent, point-in-time snapshot of a sandbox's /workspace. The filesystem is
frozen for the copy, the processes are not. The command returns once the snapshot is durable.

With --idempotency-key, repeating the command returns the same snapshot; the same key with a
different request is refused (idempotency_key_reused).`,
		Example: "  hiloop sandbox snapshot create web --name before-upgrade --idempotency-key upgrade-42",
		Args:    exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Sandbox = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, snapshotCreateRun)
		},
	}
	cmd.Flags().StringVar(&opts.Post.Name, "name", "", "the snapshot's name (default NAME-YYYYMMDD-HHMMSS)")
	cmd.Flags().StringVar(&opts.IdempotencyKey, "idempotency-key", "", "make the request safe to repeat: the same key returns the same snapshot")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func snapshotCreateRun(ctx context.Context, f *Factory, opts *SnapshotCreateOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	p := opts.Post
	if p.Name == "" {
		// Named here so the progress of this seal can be looked up; with a key, named
		// after the key so that repeating the command is the same request.
		p.Name = api.DefaultSnapshotName(opts.Sandbox, time.Now())
		if opts.IdempotencyKey != "" {
			sum := sha256.Sum256([]byte(opts.IdempotencyKey))
			p.Name = snapshotNameFor(opts.Sandbox, hex.EncodeToString(sum[:4]))
		}
	}
	progress := f.IO.StartProgress("sealing " + p.Name)
	pollCtx, stopPolling := context.WithCancel(ctx)
	if progress.Live() {
		go pollSnapshotProgress(pollCtx, c, p.Name, progress)
	}
	sn, err := c.CreateSnapshot(ctx, opts.Sandbox, p, idempotencyKey(opts.IdempotencyKey)...)
	stopPolling()
	progress.Stop()
	if err != nil {
		return err
	}
	return printSnapshot(f, opts.Output, sn)
}

// snapshotNameFor is "<sandbox>-<suffix>", the sandbox part cut to keep within the name limit.
func snapshotNameFor(sandbox, suffix string) string {
	if len(sandbox)+1+len(suffix) > api.MaxNameLen {
		sandbox = sandbox[:api.MaxNameLen-1-len(suffix)]
	}
	return sandbox + "-" + suffix
}

// pollSnapshotProgress asks how far a sealing snapshot's copy is until ctx ends, and shows it.
func pollSnapshotProgress(ctx context.Context, c *client.Client, name string, progress *iostreams.Progress) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sn, err := c.GetSnapshot(ctx, name)
			if err != nil || sn.Progress == nil || sn.Progress.TotalBytes == 0 {
				continue
			}
			done, total := sn.Progress.DoneBytes, sn.Progress.TotalBytes
			progress.Set(float64(done)/float64(total), formatBytes(done)+" / "+formatBytes(total))
		}
	}
}

// SnapshotListOptions are the argument and flags of `hiloop sandbox snapshot list`.
type SnapshotListOptions struct {
	Sandbox  string // "" for every sandbox's snapshots
	AllUsers bool
	Output   string
}

func newCmdSnapshotList(f *Factory, runF func(*SnapshotListOptions) error) *cobra.Command {
	opts := &SnapshotListOptions{}
	cmd := &cobra.Command{
		Use:     "list [NAME]",
		Aliases: []string{"ls"},
		Short:   "List snapshots, all or those of one sandbox",
		Args:    maxArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Sandbox = args[0]
			}
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, snapshotListRun)
		},
	}
	addAllUsersFlag(cmd, &opts.AllUsers)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func snapshotListRun(ctx context.Context, f *Factory, opts *SnapshotListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.ListSnapshots(ctx, opts.Sandbox, listOptions(opts.AllUsers)...)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, api.SnapshotList{Snapshots: list}, func(t *table) {
		t.head(withUser(opts.AllUsers, "USER", "NAME", "SANDBOX", "STATE", "CAPACITY", "DATA", "AGE")...)
		for _, sn := range list {
			t.row(withUser(opts.AllUsers, sn.Owner, sn.Name, sn.Sandbox, string(sn.State), formatBytes(sn.CapacityBytes),
				formatBytes(sn.AllocatedBytes), age(sn.CreatedAt))...)
		}
	})
}

// SnapshotGetOptions are the argument and flags of `hiloop sandbox snapshot get`.
type SnapshotGetOptions struct {
	Name   string
	Output string
}

func newCmdSnapshotGet(f *Factory, runF func(*SnapshotGetOptions) error) *cobra.Command {
	opts := &SnapshotGetOptions{}
	cmd := &cobra.Command{
		Use:   "get SNAPSHOT",
		Short: "Show one snapshot",
		Args:  exactArgs(1, "one SNAPSHOT name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, snapshotGetRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func snapshotGetRun(ctx context.Context, f *Factory, opts *SnapshotGetOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	sn, err := c.GetSnapshot(ctx, opts.Name)
	if err != nil {
		return err
	}
	return printSnapshot(f, opts.Output, sn)
}

func printSnapshot(f *Factory, output string, sn api.Snapshot) error {
	return printOutput(f.IO, output, sn, func(t *table) {
		t.row("name:", sn.Name)
		t.row("sandbox:", sn.Sandbox)
		t.row("state:", string(sn.State))
		t.row("capacity:", formatBytes(sn.CapacityBytes))
		t.row("data:", formatBytes(sn.AllocatedBytes))
		t.row("created:", sn.CreatedAt.Local().Format(time.RFC3339))
	})
}

// SnapshotDeleteOptions are the argument of `hiloop sandbox snapshot delete`.
type SnapshotDeleteOptions struct {
	Name string
}

func newCmdSnapshotDelete(f *Factory, runF func(*SnapshotDeleteOptions) error) *cobra.Command {
	opts := &SnapshotDeleteOptions{}
	return &cobra.Command{
		Use:     "delete SNAPSHOT",
		Aliases: []string{"rm"},
		Short:   "Delete a snapshot and free the space only it holds",
		Args:    exactArgs(1, "one SNAPSHOT name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommand(cmd, f, opts, runF, snapshotDeleteRun)
		},
	}
}

func snapshotDeleteRun(ctx context.Context, f *Factory, opts *SnapshotDeleteOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	_, err = withProgress(f, "deleting "+opts.Name, func() (struct{}, error) {
		return struct{}{}, c.DeleteSnapshot(ctx, opts.Name)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "%s deleted\n", opts.Name)
	return nil
}
