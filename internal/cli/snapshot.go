package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func newCmdSandboxGrow(f *Factory) *cobra.Command {
	var sizeGiB int
	var output string
	cmd := &cobra.Command{
		Use:   "grow NAME --workspace-gib N",
		Short: "Grow a sandbox's workspace, online if it runs (one-way)",
		Long: `Grow a sandbox's /workspace to N GiB without interrupting the processes that use it.

Growth is one-way: N must exceed the capacity shown by ` + "`hiloop sandbox get NAME`" + `.`,
		Example: "  hiloop sandbox grow web --workspace-gib 50",
		Args:    exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("workspace-gib") {
				return &usageError{fmt.Errorf("grow needs --workspace-gib N, the new capacity in GiB")}
			}
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			sb, err := c.GrowSandbox(cmd.Context(), args[0], sizeGiB)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("output") {
				return printSandbox(f, output, sb)
			}
			fmt.Fprintf(f.IO.Out, "%s workspace %s\n", sb.Name, capacity(sb.Workspace))
			return nil
		},
	}
	cmd.Flags().IntVar(&sizeGiB, "workspace-gib", 0, fmt.Sprintf("the new workspace capacity in GiB, at most %d", api.MaxWorkspaceGiB))
	addOutputFlag(cmd, &output)
	return cmd
}

func newCmdSandboxRestore(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "restore NAME SNAPSHOT",
		Short:   "Roll a stopped sandbox's workspace back to a snapshot",
		Example: "  hiloop sandbox stop web && hiloop sandbox restore web web-20261129-101500",
		Args:    exactArgs(2, "a sandbox NAME and a SNAPSHOT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			sb, err := c.RestoreSandbox(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(f.IO.Out, "%s restored from %s\n", sb.Name, args[1])
			return nil
		},
	}
}

func newCmdSnapshot(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot <verb>",
		Aliases: []string{"snapshots"},
		Short:   "Seal, list and delete snapshots of sandbox workspaces",
	}
	cmd.AddCommand(newCmdSnapshotCreate(f), newCmdSnapshotList(f), newCmdSnapshotGet(f), newCmdSnapshotDelete(f))
	return cmd
}

func newCmdSnapshotCreate(f *Factory) *cobra.Command {
	var p api.SnapshotsPost
	var key, output string
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
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			if p.Name == "" {
				// Named here so the progress of this seal can be looked up; with a key, named
				// after the key so that repeating the command is the same request.
				p.Name = api.DefaultSnapshotName(args[0], time.Now())
				if key != "" {
					sum := sha256.Sum256([]byte(key))
					p.Name = snapshotNameFor(args[0], hex.EncodeToString(sum[:4]))
				}
			}
			var opts []client.CallOption
			if key != "" {
				opts = append(opts, client.WithIdempotencyKey(key))
			}
			ctx, stop := context.WithCancel(cmd.Context())
			defer stop()
			if IsTerminal(f.IO.ErrOut) {
				go showProgress(ctx, c, p.Name, f.IO.ErrOut)
			}
			sn, err := c.CreateSnapshot(cmd.Context(), args[0], p, opts...)
			stop()
			if err != nil {
				return err
			}
			return printSnapshot(f, output, sn)
		},
	}
	cmd.Flags().StringVar(&p.Name, "name", "", "the snapshot's name (default NAME-YYYYMMDD-HHMMSS)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "make the request safe to repeat: the same key returns the same snapshot")
	addOutputFlag(cmd, &output)
	return cmd
}

// snapshotNameFor is "<sandbox>-<suffix>", the sandbox part cut to keep within the name limit.
func snapshotNameFor(sandbox, suffix string) string {
	if len(sandbox)+1+len(suffix) > api.MaxNameLen {
		sandbox = sandbox[:api.MaxNameLen-1-len(suffix)]
	}
	return sandbox + "-" + suffix
}

// showProgress draws a progress bar for a sealing snapshot until ctx ends.
func showProgress(ctx context.Context, c *client.Client, name string, w io.Writer) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	drawn := false
	for {
		select {
		case <-ctx.Done():
			if drawn {
				fmt.Fprint(w, "\r\033[K")
			}
			return
		case <-t.C:
			sn, err := c.GetSnapshot(ctx, name)
			if err != nil || sn.Progress == nil || sn.Progress.TotalBytes == 0 {
				continue
			}
			fmt.Fprintf(w, "\r\033[Ksealing %s %s", name, progressBar(sn.Progress.DoneBytes, sn.Progress.TotalBytes, 30))
			drawn = true
		}
	}
}

func progressBar(done, total int64, width int) string {
	n := int(done * int64(width) / total)
	n = min(max(n, 0), width)
	return fmt.Sprintf("[%s%s] %s / %s", strings.Repeat("#", n), strings.Repeat(".", width-n), formatBytes(done), formatBytes(total))
}

func newCmdSnapshotList(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list [NAME]",
		Aliases: []string{"ls"},
		Short:   "List snapshots, all or those of one sandbox",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return &usageError{fmt.Errorf("snapshot list takes at most one sandbox NAME")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			sandbox := ""
			if len(args) == 1 {
				sandbox = args[0]
			}
			list, err := c.ListSnapshots(cmd.Context(), sandbox)
			if err != nil {
				return err
			}
			return printOutput(f.IO.Out, output, api.SnapshotList{Snapshots: list}, func(t *table) {
				t.row("NAME", "SANDBOX", "STATE", "CAPACITY", "DATA", "AGE")
				for _, sn := range list {
					t.row(sn.Name, sn.Sandbox, string(sn.State), formatBytes(sn.CapacityBytes), formatBytes(sn.AllocatedBytes), age(sn.CreatedAt))
				}
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func newCmdSnapshotGet(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get SNAPSHOT",
		Short: "Show one snapshot",
		Args:  exactArgs(1, "one SNAPSHOT name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			sn, err := c.GetSnapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printSnapshot(f, output, sn)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func printSnapshot(f *Factory, output string, sn api.Snapshot) error {
	return printOutput(f.IO.Out, output, sn, func(t *table) {
		t.row("name:", sn.Name)
		t.row("sandbox:", sn.Sandbox)
		t.row("state:", string(sn.State))
		t.row("capacity:", formatBytes(sn.CapacityBytes))
		t.row("data:", formatBytes(sn.AllocatedBytes))
		t.row("created:", sn.CreatedAt.Local().Format(time.RFC3339))
	})
}

func newCmdSnapshotDelete(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "delete SNAPSHOT",
		Aliases: []string{"rm"},
		Short:   "Delete a snapshot and free the space only it holds",
		Args:    exactArgs(1, "one SNAPSHOT name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			if err := c.DeleteSnapshot(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(f.IO.Out, "%s deleted\n", args[0])
			return nil
		},
	}
}
