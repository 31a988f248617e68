package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
)

func newCmdUser(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "user <verb>",
		Aliases: []string{"users"},
		Short:   "Manage the daemon's users and their credentials",
		Long: `Manage the daemon's users and their credentials (admins only).

A user reaches the daemon from another machine over its TLS listener (sandboxd --listen) with a
client certificate, which their machine gets by trading a one-time trust token
(` + "`hiloop remote add`" + `), or with an API token for scripts and CI. Each user sees and acts on their own
sandboxes, snapshots, sessions, secrets and keys only; admins see everyone's. The unix socket
acts as the built-in admin user "admin", which cannot be added or removed but may hold tokens
and certificates of its own.`,
	}
	cmd.AddCommand(
		newCmdUserAdd(f, nil),
		newCmdUserList(f, nil),
		newCmdUserRemove(f, nil),
		newCmdUserTrustToken(f, nil),
		newCmdUserToken(f),
	)
	return cmd
}

// UserAddOptions are the argument and flags of `hiloop user add`.
type UserAddOptions struct {
	Post   api.UsersPost
	Output string
}

func newCmdUserAdd(f *Factory, runF func(*UserAddOptions) error) *cobra.Command {
	opts := &UserAddOptions{}
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a user and print their one-time trust token",
		Long: `Add a user and print their one-time trust token, with the command to run on their machine.

The trust token is good once, for 24 hours unless --expires says (at most 30d); only its hash is
kept, so it is shown this once (` + "`hiloop user trust-token`" + ` makes a new one). --admin makes a user
who sees and acts on every user's resources and manages users.`,
		Example: `  hiloop user add alice
  hiloop user add bob --admin --expires 2h`,
		Args: exactArgs(1, "one user NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Post.Name = args[0]
			if err := api.ValidateName("user", args[0]); err != nil {
				return &usageError{err}
			}
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, userAddRun)
		},
	}
	cmd.Flags().BoolVar(&opts.Post.Admin, "admin", false, "make the user an admin")
	cmd.Flags().StringVar(&opts.Post.TrustTokenTTL, "expires", "", "how long the trust token is good for, e.g. 2h or 7d (default 24h, at most 30d)")
	cmd.Flags().StringVar(&opts.Post.Namespace, "namespace", "", "on a cluster: the Kubernetes namespace the user's sandboxes live in (default: the front's --default-user-namespace); a single host refuses it")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func userAddRun(ctx context.Context, f *Factory, opts *UserAddOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	created, err := c.CreateUser(ctx, opts.Post)
	if err != nil {
		return err
	}
	return printTrustToken(ctx, f, opts.Output, created)
}

// printTrustToken prints a trust token and what the user runs with it: the server's
// fingerprint is asked of the daemon, the address is the one its TLS listener is reached at.
func printTrustToken(ctx context.Context, f *Factory, output string, created api.UserCreated) error {
	if output != "table" {
		return printOutput(f.IO, output, created, nil)
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	v, err := c.Version(ctx)
	if err != nil {
		return err
	}
	out := f.IO.Out
	fmt.Fprintf(out, "user:         %s\n", created.User.Name)
	fmt.Fprintf(out, "trust token:  %s\n", created.TrustToken)
	fmt.Fprintf(out, "expires:      %s (good once)\n", created.ExpiresAt.Local().Format(time.RFC3339))
	if v.TLSFingerprint == "" {
		fmt.Fprintln(out, "\nThis daemon serves no TLS listener: start sandboxd with --listen HOST:PORT, then on")
		fmt.Fprintf(out, "%s's machine run:\n", created.User.Name)
		fmt.Fprintf(out, "  hiloop remote add %s https://HOST:PORT --token %s\n", remoteName(), created.TrustToken)
		return nil
	}
	fmt.Fprintf(out, "fingerprint:  %s\n", v.TLSFingerprint)
	fmt.Fprintf(out, "\nOn %s's machine run (%s: sandboxd's --listen address; another name of this host if that machine reaches it by one):\n", created.User.Name, v.TLSEndpoint)
	fmt.Fprintf(out, "  hiloop remote add %s https://%s --token %s --accept-fingerprint %s\n", remoteName(), v.TLSEndpoint, created.TrustToken, v.TLSFingerprint)
	return nil
}

// remoteName is a name for this host as a remote: its host name, made a valid name, or "server".
func remoteName() string {
	h, err := os.Hostname()
	if err != nil {
		return "server"
	}
	h, _, _ = strings.Cut(strings.ToLower(h), ".")
	if api.ValidateName("remote", h) != nil {
		return "server"
	}
	return h
}

// UserListOptions are the flags of `hiloop user list`.
type UserListOptions struct {
	Output string
}

func newCmdUserList(f *Factory, runF func(*UserListOptions) error) *cobra.Command {
	opts := &UserListOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the users, their certificates and tokens",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, userListRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func userListRun(ctx context.Context, f *Factory, opts *UserListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.ListUsers(ctx)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, api.UserList{Users: list}, func(t *table) {
		t.head("NAME", "ADMIN", "CERTIFICATES", "TOKENS", "CREATED")
		for _, u := range list {
			created := "built-in"
			if !u.CreatedAt.IsZero() {
				created = age(u.CreatedAt)
			}
			t.row(u.Name, yesNo(u.Admin), strconv.Itoa(len(u.Certificates)), strconv.Itoa(len(u.Tokens)), created)
		}
	})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// UserRemoveOptions are the argument of `hiloop user remove`.
type UserRemoveOptions struct {
	Name string
}

func newCmdUserRemove(f *Factory, runF func(*UserRemoveOptions) error) *cobra.Command {
	opts := &UserRemoveOptions{}
	return &cobra.Command{
		Use:     "remove NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a user, their certificates and tokens, and end their connections",
		Long: `Remove a user with every certificate and token of theirs. Their open connections end at
once: requests, exec and port-forward streams, session streams, SSH sessions. What they own
stays, for an admin to see (--all-users) and delete.`,
		Args: exactArgs(1, "one user NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommand(cmd, f, opts, runF, userRemoveRun)
		},
	}
}

func userRemoveRun(ctx context.Context, f *Factory, opts *UserRemoveOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.RemoveUser(ctx, opts.Name); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "removed user %s\n", opts.Name)
	return nil
}

// UserTrustTokenOptions are the argument and flags of `hiloop user trust-token`.
type UserTrustTokenOptions struct {
	Name    string
	Expires string
	Output  string
}

func newCmdUserTrustToken(f *Factory, runF func(*UserTrustTokenOptions) error) *cobra.Command {
	opts := &UserTrustTokenOptions{}
	cmd := &cobra.Command{
		Use:   "trust-token NAME",
		Short: "Make a new one-time trust token for a user (another machine of theirs)",
		Long: `Make a new one-time trust token for a user, for another machine of theirs or one that
expired; a pending one stops being good.`,
		Args: exactArgs(1, "one user NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, userTrustTokenRun)
		},
	}
	cmd.Flags().StringVar(&opts.Expires, "expires", "", "how long the trust token is good for, e.g. 2h or 7d (default 24h, at most 30d)")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func userTrustTokenRun(ctx context.Context, f *Factory, opts *UserTrustTokenOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	created, err := c.NewTrustToken(ctx, opts.Name, opts.Expires)
	if err != nil {
		return err
	}
	return printTrustToken(ctx, f, opts.Output, created)
}

func newCmdUserToken(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "token <verb>",
		Aliases: []string{"tokens"},
		Short:   "Manage a user's API tokens, for scripts and CI",
		Long: `Manage a user's API tokens, for scripts and CI: a request that sends one as
Authorization: Bearer hl_... over the TLS listener acts as its user. The daemon keeps only a
token's hash; its value is shown once, at creation. A user manages their own tokens; an admin,
anyone's.`,
	}
	cmd.AddCommand(
		newCmdUserTokenCreate(f, nil),
		newCmdUserTokenList(f, nil),
		newCmdUserTokenRevoke(f, nil),
	)
	return cmd
}

// UserTokenCreateOptions are the argument and flags of `hiloop user token create`.
type UserTokenCreateOptions struct {
	User   string
	Post   api.TokensPost
	Output string
}

func newCmdUserTokenCreate(f *Factory, runF func(*UserTokenCreateOptions) error) *cobra.Command {
	opts := &UserTokenCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create USER --name NAME",
		Short: "Make an API token and print its value, once",
		Long: `Make an API token for USER and print its value on standard output, alone on its line,
so that a script can keep it: it is never shown again. --expires bounds its life (e.g. 30d);
without it the token is good until revoked.`,
		Example: `  hiloop user token create alice --name ci --expires 30d
  TOKEN=$(hiloop user token create alice --name nightly)`,
		Args: exactArgs(1, "one USER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.User = args[0]
			if err := api.ValidateName("token", opts.Post.Name); err != nil {
				return &usageError{fmt.Errorf("--name: %w", err)}
			}
			if err := summaryUnlessOutput(cmd, &opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, userTokenCreateRun)
		},
	}
	cmd.Flags().StringVar(&opts.Post.Name, "name", "", "the token's name, e.g. ci (required)")
	cmd.Flags().StringVar(&opts.Post.TTL, "expires", "", "how long the token is good for, e.g. 30d or 720h (default: until revoked)")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func userTokenCreateRun(ctx context.Context, f *Factory, opts *UserTokenCreateOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	tok, err := c.CreateToken(ctx, opts.User, opts.Post)
	if err != nil {
		return err
	}
	if opts.Output != "" {
		return printOutput(f.IO, opts.Output, tok, func(t *table) {
			t.row("name:", tok.Token.Name)
			t.row("value:", tok.Value)
			t.row("expires:", expiresText(tok.Token.ExpiresAt))
		})
	}
	fmt.Fprintln(f.IO.Out, tok.Value)
	until := "until revoked"
	if tok.Token.ExpiresAt != nil {
		until = "until " + expiresText(tok.Token.ExpiresAt)
	}
	fmt.Fprintf(f.IO.ErrOut, "token %s of user %s, good %s: keep the value now, it is not shown again\n", tok.Token.Name, opts.User, until)
	return nil
}

func expiresText(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Local().Format(time.RFC3339)
}

// UserTokenListOptions are the argument and flags of `hiloop user token list`.
type UserTokenListOptions struct {
	User   string
	Output string
}

func newCmdUserTokenList(f *Factory, runF func(*UserTokenListOptions) error) *cobra.Command {
	opts := &UserTokenListOptions{}
	cmd := &cobra.Command{
		Use:     "list USER",
		Aliases: []string{"ls"},
		Short:   "List a user's API tokens (never their values)",
		Args:    exactArgs(1, "one USER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.User = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, userTokenListRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func userTokenListRun(ctx context.Context, f *Factory, opts *UserTokenListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.ListTokens(ctx, opts.User)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, api.TokenList{Tokens: list}, func(t *table) {
		t.head("NAME", "CREATED", "EXPIRES", "LAST USED")
		for _, tok := range list {
			used := "never"
			if tok.LastUsedAt != nil {
				used = age(*tok.LastUsedAt) + " ago"
			}
			t.row(tok.Name, age(tok.CreatedAt), expiresText(tok.ExpiresAt), used)
		}
	})
}

// UserTokenRevokeOptions are the arguments of `hiloop user token revoke`.
type UserTokenRevokeOptions struct {
	User  string
	Token string
}

func newCmdUserTokenRevoke(f *Factory, runF func(*UserTokenRevokeOptions) error) *cobra.Command {
	opts := &UserTokenRevokeOptions{}
	return &cobra.Command{
		Use:   "revoke USER TOKEN",
		Short: "Revoke an API token and end the connections that used it",
		Args:  exactArgs(2, "a USER and a TOKEN name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.User, opts.Token = args[0], args[1]
			return runCommand(cmd, f, opts, runF, userTokenRevokeRun)
		},
	}
}

func userTokenRevokeRun(ctx context.Context, f *Factory, opts *UserTokenRevokeOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.RevokeToken(ctx, opts.User, opts.Token); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "revoked token %s of user %s\n", opts.Token, opts.User)
	return nil
}

// WhoAmIOptions are the flags of `hiloop whoami`.
type WhoAmIOptions struct {
	Output string
}

func newCmdWhoAmI(f *Factory, runF func(*WhoAmIOptions) error) *cobra.Command {
	opts := &WhoAmIOptions{}
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show the user the daemon takes you for, and by what credential",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, whoAmIRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func whoAmIRun(ctx context.Context, f *Factory, opts *WhoAmIOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	w, err := c.WhoAmI(ctx)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, w, func(t *table) {
		t.row("user:", w.User)
		t.row("admin:", yesNo(w.Admin))
		via := w.Via
		if w.Token != "" {
			via += " " + w.Token
		}
		t.row("via:", via)
	})
}
