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

// UsageOptions are the flags of `hiloop usage`.
type UsageOptions struct {
	Sandbox string
	Session string
	// Since is the --since value as given; it is turned into a time when the command runs.
	Since    string
	AllUsers bool
	Output   string
}

func newCmdUsage(f *Factory, runF func(*UsageOptions) error) *cobra.Command {
	opts := &UsageOptions{}
	cmd := &cobra.Command{
		Use:   "usage [--sandbox NAME] [--session ID] [--since DURATION|TIME]",
		Short: "Show the model tokens sandboxes and sessions spent, by sandbox, session, model and day",
		Long: `Show what the harnesses spent through the model route: tokens (input, output, cache read,
cache write, and their total, which budgets count) and requests, as the providers reported
them, summed by sandbox, by session, by model and by UTC day, and in total.

Usage is kept per sandbox and goes when the sandbox is deleted; a deleted session's usage
stays its sandbox's. SESSION (none) is what no session could be named for: side requests a
harness made outside a session, and the usage of deleted sessions.

--since takes a duration back from now (90m, 24h, 7d) or an RFC 3339 time. With -o json the
answer is the api.UsageReport the daemon sent.`,
		Example: `  hiloop usage
  hiloop usage --sandbox web --since 24h
  hiloop usage --session k3x9q2m7v4b8 -o json | jq .total.total_tokens`,
		Args: exactArgs(0, "no arguments (use --sandbox and --session)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Sandbox != "" {
				if err := api.ValidateName("sandbox", opts.Sandbox); err != nil {
					return err
				}
			}
			if opts.Session != "" {
				if err := api.ValidateSessionID(opts.Session); err != nil {
					return err
				}
			}
			if _, err := parseSince(opts.Since, time.Now()); err != nil {
				return err
			}
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, usageRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Sandbox, "sandbox", "", "only this sandbox's usage")
	fl.StringVar(&opts.Session, "session", "", "only this session's usage")
	fl.StringVar(&opts.Since, "since", "", "only usage from then on: a duration back from now (24h, 7d) or an RFC 3339 time")
	addAllUsersFlag(cmd, &opts.AllUsers)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// parseSince reads --since: "" (all usage), a duration back from now (Go's units, and d for
// days), or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		var n int
		if n, err = strconv.Atoi(days); err == nil {
			d = time.Duration(n) * 24 * time.Hour
		}
	}
	if err != nil || d <= 0 || d > 100*365*24*time.Hour {
		return time.Time{}, &usageError{fmt.Errorf("invalid --since %q: use a duration back from now (90m, 24h, 7d) or an RFC 3339 time (2025-06-30T09:00:00Z)", s)}
	}
	return now.Add(-d), nil
}

func usageRun(ctx context.Context, f *Factory, opts *UsageOptions) error {
	since, err := parseSince(opts.Since, time.Now())
	if err != nil {
		return err
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	rep, err := c.Usage(ctx, opts.Sandbox, opts.Session, since, listOptions(opts.AllUsers)...)
	if err != nil {
		return err
	}
	if opts.Output == "table" && rep.Total.Requests == 0 {
		msg := "no model usage"
		if !rep.From.IsZero() {
			msg += " since " + rep.From.Local().Format(time.RFC3339)
		}
		_, err := fmt.Fprintln(f.IO.Out, msg)
		return err
	}
	return printOutput(f.IO, opts.Output, rep, func(t *table) {
		if !rep.From.IsZero() {
			t.row("since " + rep.From.Local().Format(time.RFC3339))
			t.row()
		}
		section := func(keys []string, groups []api.UsageGroup, cells func(api.UsageGroup) []string) {
			t.row(append(keys, usageColumns...)...)
			for _, g := range groups {
				t.row(append(cells(g), usageCells(g.UsageTotals)...)...)
			}
			t.row()
		}
		all := opts.AllUsers
		section(withUser(all, "USER", "SANDBOX"), rep.BySandbox, func(g api.UsageGroup) []string {
			return withUser(all, orNone(g.Owner, "-"), sandboxLabel(g))
		})
		section(withUser(all, "USER", "SANDBOX", "SESSION"), rep.BySession, func(g api.UsageGroup) []string {
			return withUser(all, orNone(g.Owner, "-"), sandboxLabel(g), orNone(g.Session, "(none)"))
		})
		section([]string{"MODEL"}, rep.ByModel, func(g api.UsageGroup) []string { return []string{orNone(g.Model, "(unknown)")} })
		section([]string{"DAY (UTC)"}, rep.ByDay, func(g api.UsageGroup) []string { return []string{g.Day} })
		t.row(append([]string{""}, usageColumns...)...)
		t.row(append([]string{"total"}, usageCells(rep.Total)...)...)
	})
}

// usageColumns head the token counts of every section of `hiloop usage`.
var usageColumns = []string{"INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "TOTAL", "REQUESTS"}

func usageCells(u api.UsageTotals) []string {
	return []string{fmtInt(u.InputTokens), fmtInt(u.OutputTokens), fmtInt(u.CacheReadTokens),
		fmtInt(u.CacheWriteTokens), fmtInt(u.TotalTokens), fmtInt(u.Requests)}
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// sandboxLabel names a group's sandbox, by its id once it is deleted.
func sandboxLabel(g api.UsageGroup) string { return orNone(g.Sandbox, g.SandboxID) }

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// modelUsageRows adds a sandbox's or a session's model usage and budget to its `get` table.
func modelUsageRows(t *table, u *api.ModelUsage) {
	if u == nil {
		return // a daemon from before usage
	}
	requests := "requests"
	if u.Requests == 1 {
		requests = "request"
	}
	t.row("model tokens:", fmt.Sprintf("%d in %d %s (input %d, output %d, cache read %d, cache write %d)",
		u.TotalTokens, u.Requests, requests, u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens))
	t.row("model budget:", budgetText(*u))
}

// budgetText says how much of a budget is used: "1000/5000 tokens used, 4000 left".
func budgetText(u api.ModelUsage) string {
	if u.BudgetTokens == 0 {
		return "none"
	}
	left := "spent: the model route refuses requests until it is raised"
	if u.RemainingTokens != nil && *u.RemainingTokens > 0 {
		left = fmt.Sprintf("%d left", *u.RemainingTokens)
	}
	return fmt.Sprintf("%d/%d tokens used, %s", u.TotalTokens, u.BudgetTokens, left)
}

// BudgetOptions are the argument and flags of `hiloop sandbox budget` and `hiloop session budget`.
type BudgetOptions struct {
	// Target is the sandbox's name or the session's id.
	Target string
	// Tokens is the new budget; 0 (also from --clear) removes it.
	Tokens int64
	// Output is the -o format, or "" for a one-line answer.
	Output string
}

// budgetCommand is what tells `sandbox budget` and `session budget` apart.
type budgetCommand struct {
	use, short, long, example, args string
	check                           func(target string) error // of the argument, before anything runs
	what                            string                    // the budget in the one-line answer
	set                             func(ctx context.Context, c *client.Client, target string, tokens int64) (api.ModelUsage, error)
}

func newCmdSandboxBudget(f *Factory, runF func(*BudgetOptions) error) *cobra.Command {
	return newCmdBudget(f, runF, budgetCommand{
		use:   "budget NAME (--tokens N | --clear)",
		short: "Set or remove a sandbox's model token budget",
		long: `Set the sandbox's model token budget: once its harnesses have spent N tokens (input, output,
cache read and cache write together, as ` + "`hiloop usage`" + ` counts them), the model route answers their
requests with a 429 saying the hiloop budget is spent, and the session whose request it was
gets a notice. A request already running completes. Raising the budget lets the next request
through; --tokens 0 or --clear removes it. It may be set below what is already spent.

Prints the budget and how much of it is used, or the api.ModelUsage with -o.`,
		example: `  hiloop sandbox budget web --tokens 2000000
  hiloop sandbox budget web --clear`,
		args:  "one sandbox NAME",
		check: func(name string) error { return api.ValidateName("sandbox", name) },
		what:  "model token budget",
		set: func(ctx context.Context, c *client.Client, name string, tokens int64) (api.ModelUsage, error) {
			return c.SetSandboxBudget(ctx, name, tokens)
		},
	})
}

func newCmdSessionBudget(f *Factory, runF func(*BudgetOptions) error) *cobra.Command {
	return newCmdBudget(f, runF, budgetCommand{
		use:   "budget SESSION (--tokens N | --clear)",
		short: "Set, raise or remove a session's model token budget",
		long: `Set the session's model token budget: once the session's requests have spent N tokens, the
model route refuses them with a 429 saying the hiloop budget is spent, the session gets a
notice saying so, and the turn ends. Raising the budget lets the next prompt run; --tokens 0
or --clear removes it (the sandbox's budget still counts).

Prints the budget and how much of it is used, or the api.ModelUsage with -o.`,
		example: `  hiloop session budget k3x9q2m7v4b8 --tokens 500000`,
		args:    "one SESSION id",
		check:   api.ValidateSessionID,
		what:    "token budget",
		set: func(ctx context.Context, c *client.Client, id string, tokens int64) (api.ModelUsage, error) {
			return c.SetSessionBudget(ctx, id, tokens)
		},
	})
}

func newCmdBudget(f *Factory, runF func(*BudgetOptions) error, bc budgetCommand) *cobra.Command {
	opts := &BudgetOptions{}
	var clear bool
	cmd := &cobra.Command{
		Use:     bc.use,
		Short:   bc.short,
		Long:    bc.long,
		Example: bc.example,
		Args:    exactArgs(1, bc.args),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := bc.check(args[0]); err != nil {
				return err
			}
			opts.Target = args[0]
			switch set := cmd.Flags().Changed("tokens"); {
			case set == clear:
				return &usageError{fmt.Errorf("%s takes --tokens N or --clear", cmd.CommandPath())}
			case set:
				if err := api.ValidateBudget("--tokens", opts.Tokens); err != nil {
					return &usageError{err}
				}
			}
			if err := summaryUnlessOutput(cmd, &opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, func(ctx context.Context, f *Factory, opts *BudgetOptions) error {
				c, err := f.Client()
				if err != nil {
					return err
				}
				u, err := bc.set(ctx, c, opts.Target, opts.Tokens)
				if err != nil {
					return err
				}
				return printBudget(f, opts.Output, opts.Target, bc.what, u)
			})
		},
	}
	cmd.Flags().Int64Var(&opts.Tokens, "tokens", 0, "the new budget in tokens (input, output and cache together); 0 removes it")
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the budget")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// printBudget answers a budget command: "web: model token budget 1000/5000 tokens used, 4000
// left", or the usage in the -o format.
func printBudget(f *Factory, output, who, what string, u api.ModelUsage) error {
	if output != "" {
		return printOutput(f.IO, output, u, func(t *table) { modelUsageRows(t, &u) })
	}
	if u.BudgetTokens == 0 {
		_, err := fmt.Fprintf(f.IO.Out, "%s: no %s, %d tokens used\n", who, what, u.TotalTokens)
		return err
	}
	_, err := fmt.Fprintf(f.IO.Out, "%s: %s %s\n", who, what, budgetText(u))
	return err
}
