package cli

import "github.com/spf13/cobra"

// newCmdSandboxEgressParent stands in for `hiloop sandbox egress` until the command that sets a
// sandbox's egress policy lands; at merge this file goes and that command adds
// newCmdSandboxEgressLog(f, nil) as its subcommand.
func newCmdSandboxEgressParent(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "egress <verb>",
		Short: "Show a sandbox's egress",
	}
	cmd.AddCommand(newCmdSandboxEgressLog(f, nil))
	return cmd
}
