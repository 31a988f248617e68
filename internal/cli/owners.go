package cli

import (
	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/client"
)

// An admin lists every user's sandboxes, snapshots, sessions and usage with --all-users: the
// tables gain a USER column, and -o json carries every item's owner as it always does.

// addAllUsersFlag adds --all-users to a list command.
func addAllUsersFlag(cmd *cobra.Command, all *bool) {
	cmd.Flags().BoolVar(all, "all-users", false, "list every user's, with a USER column (needs an admin)")
}

// listOptions are the call options of a list with --all-users set to all.
func listOptions(all bool) []client.CallOption {
	if all {
		return []client.CallOption{client.AllUsers()}
	}
	return nil
}

// withUser is a table's cells, led by the USER column when all: the header's "USER", a row's
// owner.
func withUser(all bool, user string, cells ...string) []string {
	if !all {
		return cells
	}
	return append([]string{user}, cells...)
}
