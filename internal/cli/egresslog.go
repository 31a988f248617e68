package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

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
	ctx, stop := followContext(ctx, opts.Follow)
	defer stop()
	c, err := f.Client()
	if err != nil {
		return err
	}
	show := func(rec api.EgressRecord) error { return writeEgressRecord(f.IO.Out, opts.Output, rec) }
	// What is stored first, a page at a time; the header only once the sandbox is known.
	after := opts.After
	for first := true; ; first = false {
		page, err := c.EgressLog(ctx, opts.Name, after, api.MaxEgressLogPage, 0)
		if err != nil {
			return err
		}
		if first && opts.Output == "table" {
			if _, err := fmt.Fprintln(f.IO.Out, egressHeader); err != nil {
				return err
			}
		}
		for _, rec := range page {
			if err := show(rec); err != nil {
				return err
			}
			after = rec.Seq
		}
		if len(page) < api.MaxEgressLogPage {
			break
		}
	}
	if !opts.Follow {
		return nil
	}
	err = c.FollowEgressLog(ctx, opts.Name, after, show, client.OnStreamLost(func(err error) {
		fmt.Fprintf(f.IO.ErrOut, "hiloop: %s; reconnecting\n", err)
	}))
	if ctx.Err() != nil {
		return nil // Ctrl-C ends a follow
	}
	return err
}

const egressFormat = "%-6s  %-19s  %-10s  %-40s  %-7s  %10s  %10s  %9s  %s"

var egressHeader = strings.TrimRight(fmt.Sprintf(egressFormat, "SEQ", "TIME", "KIND", "DESTINATION", "VERDICT", "UP", "DOWN", "DURATION", "RULE / ERROR"), " ")

// writeEgressRecord prints one record as a table line, a JSON line or a YAML document.
func writeEgressRecord(w io.Writer, format string, rec api.EgressRecord) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(rec)
	case "yaml":
		b, err := yaml.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "---\n%s", b)
		return err
	}
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
	duration := (time.Duration(rec.DurationMS * float64(time.Millisecond))).Round(time.Millisecond).String()
	line := fmt.Sprintf(egressFormat, strconv.FormatUint(rec.Seq, 10), rec.Time.Local().Format("2006-01-02T15:04:05"),
		rec.Kind, dest, verdict, formatBytes(rec.BytesUp), formatBytes(rec.BytesDown), duration, why)
	_, err := fmt.Fprintln(w, strings.TrimRight(line, " "))
	return err
}
