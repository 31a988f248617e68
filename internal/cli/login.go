package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
)

func newCmdLogin(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "login <verb>",
		Aliases: []string{"logins"},
		Short:   "Connect the model providers' logins that harnesses use",
		Long: `Connect the model providers' logins that harnesses use.

A login is the operator's credential for a provider: for claude, an Anthropic API key or the
token ` + "`claude setup-token`" + ` prints (Claude Pro/Max); for codex, an OpenAI API key or the
auth.json ` + "`codex login`" + ` writes (a ChatGPT login). The daemon keeps it sealed under its
master key and never shows it; a sandbox sees only a placeholder, which the model route swaps
for the real credential on the way out. A ChatGPT login is refreshed by the daemon alone.`,
	}
	cmd.AddCommand(
		newCmdLoginAdd(f, nil),
		newCmdLoginList(f, nil),
		newCmdLoginRemove(f, nil),
	)
	return cmd
}

// LoginAddOptions are the argument and flags of `hiloop login add`; the value is read when
// the command runs.
type LoginAddOptions struct {
	Provider        api.LoginProvider
	APIKeyStdin     bool
	OAuthTokenStdin bool
	ChatGPTAuthFile string
	Output          string
}

// kind returns the kind of login the flags ask for, or a usage error.
func (o *LoginAddOptions) kind() (api.LoginKind, error) {
	var kinds []api.LoginKind
	if o.APIKeyStdin {
		kinds = append(kinds, api.LoginAPIKey)
	}
	if o.OAuthTokenStdin {
		kinds = append(kinds, api.LoginOAuthToken)
	}
	if o.ChatGPTAuthFile != "" {
		kinds = append(kinds, api.LoginChatGPT)
	}
	want := map[api.LoginProvider]string{
		api.LoginClaude: "--api-key-stdin or --oauth-token-stdin",
		api.LoginCodex:  "--api-key-stdin or --chatgpt-auth-file FILE",
	}[o.Provider]
	if want == "" {
		return "", &usageError{fmt.Errorf("unknown provider %q: give claude or codex", o.Provider)}
	}
	if len(kinds) != 1 {
		return "", &usageError{fmt.Errorf("give exactly one of %s (a value is never taken from the command line)", want)}
	}
	k := kinds[0]
	if (k == api.LoginOAuthToken && o.Provider != api.LoginClaude) || (k == api.LoginChatGPT && o.Provider != api.LoginCodex) {
		return "", &usageError{fmt.Errorf("a %s login takes %s", o.Provider, want)}
	}
	return k, nil
}

func newCmdLoginAdd(f *Factory, runF func(*LoginAddOptions) error) *cobra.Command {
	opts := &LoginAddOptions{}
	cmd := &cobra.Command{
		Use:   "add PROVIDER",
		Short: "Connect a provider login (claude or codex), replacing the one before",
		Long: `Connect a provider login, replacing the one before.

claude takes --api-key-stdin (an Anthropic API key) or --oauth-token-stdin (the token
` + "`claude setup-token`" + ` prints). codex takes --api-key-stdin (an OpenAI API key) or
--chatgpt-auth-file FILE (the auth.json ` + "`codex login`" + ` writes; run it with a temporary
CODEX_HOME: the daemon refreshes the login at once and takes it over, so the copy you gave
must sign in again). One final line break of a value read from standard input is dropped.`,
		Example: `  printf %s "$ANTHROPIC_API_KEY" | hiloop login add claude --api-key-stdin
  claude setup-token | hiloop login add claude --oauth-token-stdin
  CODEX_HOME=$(mktemp -d) sh -c 'codex login && hiloop login add codex --chatgpt-auth-file "$CODEX_HOME/auth.json"'`,
		Args: exactArgs(1, "one PROVIDER (claude or codex)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Provider = api.LoginProvider(args[0])
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			if _, err := opts.kind(); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, loginAddRun)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.APIKeyStdin, "api-key-stdin", false, "read an API key from standard input")
	fl.BoolVar(&opts.OAuthTokenStdin, "oauth-token-stdin", false, "claude: read the token that claude setup-token prints from standard input")
	fl.StringVar(&opts.ChatGPTAuthFile, "chatgpt-auth-file", "", "codex: the auth.json that codex login wrote")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func loginAddRun(ctx context.Context, f *Factory, opts *LoginAddOptions) error {
	kind, err := opts.kind()
	if err != nil {
		return err
	}
	var b []byte
	if opts.ChatGPTAuthFile != "" {
		var fh *os.File
		if fh, err = os.Open(opts.ChatGPTAuthFile); err == nil {
			b, err = io.ReadAll(io.LimitReader(fh, api.MaxLoginValueBytes+1))
			fh.Close()
		}
	} else {
		b, err = io.ReadAll(io.LimitReader(f.IO.In, api.MaxLoginValueBytes+1))
	}
	if err != nil {
		return fmt.Errorf("read the login: %w", err)
	}
	body := api.LoginPut{Kind: kind, Value: strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")}
	if err := body.Validate(opts.Provider); err != nil {
		return &usageError{err}
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.PutLogin(ctx, opts.Provider, body)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, l, func(t *table) { loginRows(t, []api.Login{l}, false) })
}

// loginRows is the logins table, with the USER column first for --all-users.
func loginRows(t *table, list []api.Login, allUsers bool) {
	t.head(withUser(allUsers, "USER", "PROVIDER", "KIND", "STATUS", "FINGERPRINT", "EXPIRES", "UPDATED")...)
	for _, l := range list {
		status := string(l.Status)
		if l.StatusMessage != "" {
			status += ": " + l.StatusMessage
		}
		expires := "-"
		if l.ExpiresAt != nil {
			expires = l.ExpiresAt.Local().Format(time.RFC3339)
		}
		t.row(withUser(allUsers, l.Owner, string(l.Provider), string(l.Kind), status, l.Fingerprint, expires, age(l.UpdatedAt))...)
	}
}

// LoginListOptions are the flags of `hiloop login list`.
type LoginListOptions struct {
	AllUsers bool
	Output   string
}

func newCmdLoginList(f *Factory, runF func(*LoginListOptions) error) *cobra.Command {
	opts := &LoginListOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your provider logins (never their values) and whether they need reconnecting",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, loginListRun)
		},
	}
	addAllUsersFlag(cmd, &opts.AllUsers)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func loginListRun(ctx context.Context, f *Factory, opts *LoginListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.ListLogins(ctx, listOptions(opts.AllUsers)...)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, api.LoginList{Logins: list}, func(t *table) { loginRows(t, list, opts.AllUsers) })
}

// LoginRemoveOptions are the argument of `hiloop login remove`.
type LoginRemoveOptions struct {
	Provider api.LoginProvider
}

func newCmdLoginRemove(f *Factory, runF func(*LoginRemoveOptions) error) *cobra.Command {
	opts := &LoginRemoveOptions{}
	cmd := &cobra.Command{
		Use:     "remove PROVIDER",
		Aliases: []string{"rm", "delete"},
		Short:   "Remove a provider login; the model route refuses that provider's requests from then on",
		Args:    exactArgs(1, "one PROVIDER (claude or codex)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Provider = api.LoginProvider(args[0])
			if api.LoginKinds(opts.Provider) == nil {
				return &usageError{fmt.Errorf("unknown provider %q: give claude or codex", opts.Provider)}
			}
			return runCommand(cmd, f, opts, runF, loginRemoveRun)
		},
	}
	return cmd
}

func loginRemoveRun(ctx context.Context, f *Factory, opts *LoginRemoveOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	return c.DeleteLogin(ctx, opts.Provider)
}

// AuditOptions are the flags of `hiloop audit`.
type AuditOptions struct {
	After  uint64
	Follow bool
	Output string
}

func newCmdAudit(f *Factory, runF func(*AuditOptions) error) *cobra.Command {
	opts := &AuditOptions{}
	cmd := &cobra.Command{
		Use:   "audit [--after SEQ] [--follow]",
		Short: "Show the daemon's audit log of changes and provider logins, and with --follow keep watching it",
		Long: `Show the daemon's audit log, oldest first: every API call that changed something (any
method but GET), with its user (USER; "as NAME" when an admin acted in another's namespace),
its route and status, never its body; client certificates issued; provider logins added,
removed, refreshed or refused by the provider, and each harness start that used a login. The
daemon keeps the newest 10,000 records across restarts. With -o json, each line is one api.AuditRecord.

With --follow, keep watching for new records until Ctrl-C (exit 0).`,
		Example: `  hiloop audit
  hiloop audit --follow -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, auditRun)
		},
	}
	fl := cmd.Flags()
	fl.Uint64Var(&opts.After, "after", 0, "show only records with seq greater than SEQ")
	fl.BoolVarP(&opts.Follow, "follow", "f", false, "keep watching for new records until Ctrl-C")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func auditRun(ctx context.Context, f *Factory, opts *AuditOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	return recordLog[api.AuditRecord]{
		page: func(ctx context.Context, after uint64) ([]api.AuditRecord, error) {
			return c.Audit(ctx, after, api.MaxEgressLogPage, 0)
		},
		follow: c.FollowAudit,
		seq:    func(r api.AuditRecord) uint64 { return r.Seq },
		header: auditHeader,
		line:   auditLine,
	}.print(ctx, f, opts.Output, opts.After, opts.Follow)
}

const auditFormat = "%-6s  %-19s  %-10s  %-22s  %-8s  %-12s  %s"

var auditHeader = strings.TrimRight(fmt.Sprintf(auditFormat, "SEQ", "TIME", "USER", "ACTION", "PROVIDER", "KIND", "DETAIL"), " ")

// auditLine is one record as a table line. An API call's detail is its method and path, the
// route's names filled in, and the status it was answered with.
func auditLine(rec api.AuditRecord) string {
	var detail []string
	if rec.Route != "" {
		path := rec.Route
		for name, v := range rec.Resources {
			path = strings.Replace(path, "{"+name+"}", v, 1)
		}
		detail = append(detail, fmt.Sprintf("%s %s %d", rec.Method, path, rec.Status))
	}
	if rec.As != "" {
		detail = append(detail, "as "+rec.As)
	}
	if rec.Sandbox != "" {
		detail = append(detail, "sandbox "+rec.Sandbox)
	}
	if rec.Harness != "" {
		detail = append(detail, "harness "+rec.Harness)
	}
	if rec.Owner != "" {
		detail = append(detail, "login of "+rec.Owner)
	}
	if rec.Session != "" {
		detail = append(detail, "session "+rec.Session)
	}
	if rec.Message != "" {
		detail = append(detail, rec.Message)
	}
	line := fmt.Sprintf(auditFormat, fmt.Sprint(rec.Seq), rec.Time.Local().Format("2006-01-02T15:04:05"), dash(rec.User), rec.Action,
		dash(string(rec.Provider)), dash(string(rec.Kind)), strings.Join(detail, "; "))
	return strings.TrimRight(line, " ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
