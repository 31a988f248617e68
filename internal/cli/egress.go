package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
)

// SandboxEgressOptions are the argument and flags of `hiloop sandbox egress`.
type SandboxEgressOptions struct {
	Name string
	// Mode is the new mode, "" to keep it.
	Mode api.EgressMode
	// Allow and Deny are rules to add; RemoveAllow and RemoveDeny rules to take out; Clear
	// empties both lists first. All normalised.
	Allow, Deny, RemoveAllow, RemoveDeny []string
	Clear                                bool
	Output                               string
}

// changes reports whether the options change the policy; without changes the command shows it.
func (o *SandboxEgressOptions) changes() bool {
	return o.Mode != "" || o.Clear || len(o.Allow)+len(o.Deny)+len(o.RemoveAllow)+len(o.RemoveDeny) > 0
}

func newCmdSandboxEgress(f *Factory, runF func(*SandboxEgressOptions) error) *cobra.Command {
	opts := &SandboxEgressOptions{}
	var mode string
	cmd := &cobra.Command{
		Use:   "egress NAME",
		Short: "Show or change a sandbox's egress policy",
		Long: `Show or change a sandbox's egress policy: which hosts it may reach through the gateway.

Without flags, shows the policy. --mode open lets through everything no deny rule names;
--mode closed only what an allow rule names. Rules are HOST[:PORT]: a name (api.example.com),
a wildcard for every name under a domain at any depth, but not the domain itself
(*.example.com), or an IP address ([2001:db8::1]:443); without a port a rule covers every port.
Deny wins over allow. The host's own, private, link-local and metadata addresses stay refused
whatever the policy says. In a closed sandbox, names no rule allows do not resolve.

A change applies at once to the sandbox's new connections and DNS questions; connections it
already has (an open tunnel, a download in progress) go on. It is kept across stop, start and
daemon restarts.`,
		Example: `  hiloop sandbox egress web
  hiloop sandbox egress web --mode closed --allow api.example.com --allow '*.github.com:443'
  hiloop sandbox egress web --deny '*.example.net' --remove-allow api.example.com
  hiloop sandbox egress web --mode open --clear`,
		Args: exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			var err error
			if opts.Mode, err = egressMode("--mode", mode); err != nil {
				return err
			}
			for _, list := range []struct {
				flag  string
				rules *[]string
			}{{"--allow", &opts.Allow}, {"--deny", &opts.Deny}, {"--remove-allow", &opts.RemoveAllow}, {"--remove-deny", &opts.RemoveDeny}} {
				if *list.rules, err = egressRules(list.flag, *list.rules); err != nil {
					return err
				}
			}
			return runCommand(cmd, f, opts, runF, sandboxEgressRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&mode, "mode", "", "open (everything not denied) or closed (only what is allowed)")
	fl.StringArrayVar(&opts.Allow, "allow", nil, "add an allow rule HOST[:PORT] (repeatable)")
	fl.StringArrayVar(&opts.Deny, "deny", nil, "add a deny rule HOST[:PORT] (repeatable)")
	fl.StringArrayVar(&opts.RemoveAllow, "remove-allow", nil, "take an allow rule out (repeatable)")
	fl.StringArrayVar(&opts.RemoveDeny, "remove-deny", nil, "take a deny rule out (repeatable)")
	fl.BoolVar(&opts.Clear, "clear", false, "empty both lists before --allow and --deny add to them")
	addOutputFlag(cmd, &opts.Output)
	// `log` is matched as the subcommand before NAME: a sandbox named log shows its policy with
	// `hiloop sandbox get log`.
	cmd.AddCommand(newCmdSandboxEgressLog(f, nil))
	return cmd
}

func sandboxEgressRun(ctx context.Context, f *Factory, opts *SandboxEgressOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	sb, err := c.GetSandbox(ctx, opts.Name)
	if err != nil {
		return err
	}
	if opts.changes() {
		// Read, change, write back the whole policy: PUT is idempotent, so repeating the
		// command gives the same policy. Two changes made at the same moment can lose one.
		p := applyEgressChanges(sb.Egress, opts, func(msg string) { fmt.Fprintln(f.IO.ErrOut, "hiloop: "+msg) })
		if sb, err = c.SetSandboxEgress(ctx, opts.Name, p); err != nil {
			return err
		}
	}
	return printEgress(f, opts.Output, sb.Egress)
}

// applyEgressChanges returns p with the options' changes made; warn hears of a rule to remove
// that is not there.
func applyEgressChanges(p api.Egress, opts *SandboxEgressOptions, warn func(string)) api.Egress {
	if opts.Mode != "" {
		p.Mode = opts.Mode
	}
	allow, deny := slices.Clone(p.Allow), slices.Clone(p.Deny)
	if opts.Clear {
		allow, deny = nil, nil
	}
	remove := func(list []string, rules []string, what string) []string {
		for _, r := range rules {
			i := slices.Index(list, r)
			if i < 0 {
				warn(fmt.Sprintf("%s is not in the %s list of %s", r, what, opts.Name))
				continue
			}
			list = slices.Delete(list, i, i+1)
		}
		return list
	}
	add := func(list []string, rules []string) []string {
		for _, r := range rules {
			if !slices.Contains(list, r) {
				list = append(list, r)
			}
		}
		return list
	}
	p.Allow = add(remove(allow, opts.RemoveAllow, "allow"), opts.Allow)
	p.Deny = add(remove(deny, opts.RemoveDeny, "deny"), opts.Deny)
	return p
}

func printEgress(f *Factory, output string, p api.Egress) error {
	return printOutput(f.IO, output, p, func(t *table) {
		t.row("mode:", string(p.Mode))
		t.row("allow:", ruleList(p.Allow))
		t.row("deny:", ruleList(p.Deny))
	})
}

// egressSummary is a policy on one line, for `sandbox get`.
func egressSummary(p api.Egress) string {
	s := string(p.Mode)
	if len(p.Allow) > 0 {
		s += "; allow " + ruleList(p.Allow)
	}
	if len(p.Deny) > 0 {
		s += "; deny " + ruleList(p.Deny)
	}
	return s
}

func ruleList(rules []string) string {
	if len(rules) == 0 {
		return "-"
	}
	return strings.Join(rules, ", ")
}

// egressMode checks a mode flag's value; "" stays "".
func egressMode(flag, mode string) (api.EgressMode, error) {
	switch m := api.EgressMode(mode); m {
	case "", api.EgressOpen, api.EgressClosed:
		return m, nil
	}
	return "", &usageError{fmt.Errorf("invalid %s %q: use open or closed", flag, mode)}
}

// egressRules checks and normalises the rules given with flag, so a typo fails before anything
// is asked of the daemon.
func egressRules(flag string, rules []string) ([]string, error) {
	if len(rules) > api.MaxEgressRules {
		return nil, &usageError{fmt.Errorf("%d %s rules: at most %d", len(rules), flag, api.MaxEgressRules)}
	}
	var out []string
	for _, r := range rules {
		n, err := api.NormalizeEgressRule(r)
		if err != nil {
			return nil, &usageError{fmt.Errorf("invalid %s %q: %v", flag, r, err)}
		}
		out = append(out, n)
	}
	return out, nil
}
