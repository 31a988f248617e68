package cli

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// SandboxEgressLogOptions are the flags and argument of `hiloop sandbox egress log`.
type SandboxEgressLogOptions struct {
	Name   string
	After  uint64
	Follow bool
	Output string
}

func newCmdSandboxEgressLog(f *Factory, runF func(*SandboxEgressLogOptions) error) *cobra.Command {
	opts := &SandboxEgressLogOptions{}
	cmd := &cobra.Command{
		Use:   "log NAME [--after SEQ] [--follow]",
		Short: "Show the egress audit log of a sandbox, and with --follow keep watching it",
		Long: `Show every decision the egress gateway took for a sandbox, oldest first: each connection
allowed or refused (with the rule that refused it), each DNS query, the bytes each way, how
long it lasted, and whether a secret was put into it. The daemon keeps the newest 10,000
records per sandbox, across restarts, and drops them with the sandbox.

The table has one line per record: seq, time, kind, host:port (the DNS question and its
type for dns), allowed or denied, bytes up and down, duration, and the rule or the error.
With -o json, each line is one api.EgressRecord as the daemon sent it.

With --follow, keep watching for new records until Ctrl-C (exit 0); a daemon restart is
picked up where it left off, so no record is shown twice or missed.`,
		Example: `  hiloop sandbox egress log web
  hiloop sandbox egress log web --follow
  hiloop sandbox egress log web -o json | jq -r 'select(.allowed | not) | "\(.host) \(.rule)"'`,
		Args: exactArgs(1, "one sandbox NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sandboxEgressLogRun)
		},
	}
	fl := cmd.Flags()
	fl.Uint64Var(&opts.After, "after", 0, "show only records with seq greater than SEQ")
	fl.BoolVarP(&opts.Follow, "follow", "f", false, "keep watching for new records until Ctrl-C")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// sandboxEgressLogRun prints a sandbox's egress records; with opts.Follow it runs until ctx
// ends, and that is success.
func sandboxEgressLogRun(ctx context.Context, f *Factory, opts *SandboxEgressLogOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	return recordLog[api.EgressRecord]{
		page: func(ctx context.Context, after uint64) ([]api.EgressRecord, error) {
			return c.EgressLog(ctx, opts.Name, after, api.MaxEgressLogPage, 0)
		},
		follow: func(ctx context.Context, after uint64, fn func(api.EgressRecord) error, o ...client.StreamOption) error {
			return c.FollowEgressLog(ctx, opts.Name, after, fn, o...)
		},
		seq:    func(r api.EgressRecord) uint64 { return r.Seq },
		header: egressHeader,
		line:   egressLine,
	}.print(ctx, f, opts.Output, opts.After, opts.Follow)
}

const egressFormat = "%-6s  %-19s  %-10s  %-40s  %-7s  %10s  %10s  %9s  %s"

var egressHeader = strings.TrimRight(fmt.Sprintf(egressFormat, "SEQ", "TIME", "KIND", "DESTINATION", "VERDICT", "UP", "DOWN", "DURATION", "RULE / ERROR"), " ")

// egressLine is one record as a table line.
func egressLine(rec api.EgressRecord) string {
	verdict := "denied"
	if rec.Allowed {
		verdict = "allowed"
	}
	dest := rec.Host
	switch {
	case rec.Kind == api.EgressKindDropped:
		dest, verdict = "-", "-"
	case rec.Kind == "dns":
		dest = strings.TrimSpace(rec.Host + " " + rec.QueryType)
	case rec.Host != "" && rec.Port != 0:
		dest = net.JoinHostPort(rec.Host, strconv.Itoa(int(rec.Port)))
	case rec.Host == "":
		dest = rec.Addr
	}
	why := rec.Rule
	if rec.Error != "" {
		why = strings.TrimSpace(why + " error: " + rec.Error)
	}
	if rec.Secret {
		why = strings.TrimSpace(why + " (secret injected)")
	}
	if rec.SecretScrubbed {
		why = strings.TrimSpace(why + " (secret scrubbed from the answer)")
	}
	duration := (time.Duration(rec.DurationMS * float64(time.Millisecond))).Round(time.Millisecond).String()
	line := fmt.Sprintf(egressFormat, strconv.FormatUint(rec.Seq, 10), rec.Time.Local().Format("2006-01-02T15:04:05"),
		rec.Kind, dest, verdict, formatBytes(rec.BytesUp), formatBytes(rec.BytesDown), duration, why)
	return strings.TrimRight(line, " ")
}
