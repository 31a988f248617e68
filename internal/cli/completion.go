package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// completionTimeout bounds the daemon call behind a completion: a shell waits for it on Tab.
const completionTimeout = 2 * time.Second

// lister names the things of one kind the daemon has, for completing an argument.
type lister func(ctx context.Context, c *client.Client) ([]string, error)

var (
	sandboxNames lister = func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.ListSandboxes(ctx)
		return names(list, err, func(i int) string { return list[i].Name })
	}
	sessionIDs lister = func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.ListSessions(ctx, "")
		return names(list, err, func(i int) string { return list[i].ID + "\t" + list[i].Harness + " in " + list[i].Sandbox })
	}
	snapshotNames lister = func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.ListSnapshots(ctx, "")
		return names(list, err, func(i int) string { return list[i].Name + "\tof " + list[i].Sandbox })
	}
	secretNames lister = func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.ListSecrets(ctx)
		return names(list, err, func(i int) string { return list[i].Name })
	}
	imageNames lister = func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.ListImages(ctx)
		return list.Definitions, err
	}
	userNames lister = func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.ListUsers(ctx)
		return names(list, err, func(i int) string { return list[i].Name })
	}
	sshKeyNames lister = func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.ListSSHKeys(ctx)
		return names(list, err, func(i int) string { return list[i].Name })
	}
)

func names[T any](list []T, err error, name func(int) string) ([]string, error) {
	if err != nil {
		return nil, err
	}
	out := make([]string, len(list))
	for i := range list {
		out[i] = name(i)
	}
	return out, nil
}

// argListers says what each positional argument of a command is, by the command's path below
// hiloop: what completes the first, second, ... argument. A command not here takes no argument
// that names something the daemon has (a new name, text, a file).
var argListers = map[string][]lister{
	"sandbox get":             {sandboxNames},
	"sandbox delete":          {sandboxNames},
	"sandbox start":           {sandboxNames},
	"sandbox stop":            {sandboxNames},
	"sandbox exec":            {sandboxNames},
	"sandbox grow":            {sandboxNames},
	"sandbox restore":         {sandboxNames, snapshotNames},
	"sandbox egress":          {sandboxNames},
	"sandbox egress log":      {sandboxNames},
	"sandbox budget":          {sandboxNames},
	"sandbox ssh":             {sandboxNames},
	"sandbox port-forward":    {sandboxNames},
	"sandbox expose":          {sandboxNames},
	"sandbox unexpose":        {sandboxNames},
	"sandbox secret attach":   {sandboxNames, secretNames},
	"sandbox secret detach":   {sandboxNames, secretNames},
	"sandbox snapshot create": {sandboxNames},
	"sandbox snapshot list":   {sandboxNames},
	"sandbox snapshot get":    {snapshotNames},
	"sandbox snapshot delete": {snapshotNames},
	"session new":             {sandboxNames},
	"session list":            {sandboxNames},
	"session get":             {sessionIDs},
	"session prompt":          {sessionIDs},
	"session events":          {sessionIDs},
	"session approve":         {sessionIDs},
	"session deny":            {sessionIDs},
	"session cancel":          {sessionIDs},
	"session budget":          {sessionIDs},
	"session delete":          {sessionIDs},
	"chat":                    {sandboxNames},
	"secret get":              {secretNames},
	"secret delete":           {secretNames},
	"secret rotate":           {secretNames},
	"image build":             {imageNames},
	"ssh-key remove":          {sshKeyNames},
	"ssh-config":              {sandboxNames},
	"user remove":             {userNames},
	"user trust-token":        {userNames},
	"user token create":       {userNames},
	"user token list":         {userNames},
	"user token revoke":       {userNames},
}

// flagListers complete the values of flags that name something, on whichever command has them.
var flagListers = map[string]lister{
	"image":         imageNames,
	"from-snapshot": snapshotNames,
	"sandbox":       sandboxNames,
	"session":       sessionIDs,
	"secret":        secretNames,
}

// fixedFlagValues complete flags whose values are a fixed set, each taken from where pkg/api
// declares it.
var fixedFlagValues = map[string][]string{
	"output":            {"table", "json", "yaml"},
	"harness":           api.Harnesses(),
	"policy":            strs(api.PermissionPolicies()),
	"permission-policy": strs(api.PermissionPolicies()),
	"storage-class":     strs(api.StorageClasses()),
	"egress":            strs(api.EgressModes()),
}

// strs turns a list of pkg/api's string types into the strings a shell completes.
func strs[T ~string](list []T) []string {
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = string(v)
	}
	return out
}

// addCompletions gives every command of the tree its argument and flag completions: names the
// daemon has (asked with a short timeout, nothing offered when it does not answer) and fixed
// sets of values, never the file names a shell offers by default.
func addCompletions(root *cobra.Command, f *Factory) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() {
			return
		}
		path := strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), root.Name()), " ")
		if listers, ok := argListers[path]; ok {
			c.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
				if len(args) >= len(listers) || slices.Contains(args, "--") {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return complete(f, listers[len(args)])
			}
		} else if c.ValidArgsFunction == nil && c.Args != nil {
			c.ValidArgsFunction = cobra.NoFileCompletions
		}
		// The flags c declares, persistent or not: what LocalFlags gives, without the merge of
		// every parent's flag set it makes per call, which cost every command's start a
		// profile's worth of CPU.
		register := func(fl *pflag.Flag) {
			if l, ok := flagListers[fl.Name]; ok {
				_ = c.RegisterFlagCompletionFunc(fl.Name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
					return complete(f, l)
				})
			} else if vals, ok := fixedFlagValues[fl.Name]; ok {
				_ = c.RegisterFlagCompletionFunc(fl.Name, cobra.FixedCompletions(vals, cobra.ShellCompDirectiveNoFileComp))
			}
		}
		c.Flags().VisitAll(register)
		c.PersistentFlags().VisitAll(register)
	}
	walk(root)
}

func complete(f *Factory, l lister) ([]string, cobra.ShellCompDirective) {
	c, err := f.Client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	list, err := l(ctx, c)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	return list, cobra.ShellCompDirectiveNoFileComp
}
